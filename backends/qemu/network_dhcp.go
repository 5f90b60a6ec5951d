package qemu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Leases. slirpvde's DHCP server keeps its leases in memory only and has
// no per-MAC option: a client it does not know gets the first free of 16
// slots, 10.0.2.15 up, so a restarted slirpvde would give out an address a
// running VM still holds. But it answers a DISCOVER from a MAC it knows
// with that MAC's slot, and fills the slots strictly in order. So poligon
// asks for every member VM's lease itself, before the VM boots, records
// the answers in <net>/leases, and after a restart asks again for every
// recorded MAC in address order (a placeholder MAC for a slot it did not
// see given out): slirpvde then holds the leases it had, and also knows
// again which MAC each address is on, which its NAT needs to answer a VM.

// dhcpFirst is the address slirpvde's DHCP gives out first.
var dhcpFirst = netip.MustParseAddr("10.0.2.15")

type lease struct {
	mac string
	ip  netip.Addr
}

func (n network) leasesFile() string { return n.dir + "/leases" }

// readLeases answers the recorded leases in address order.
func readLeases(path string) []lease {
	raw, _ := os.ReadFile(path)
	var ls []lease
	for line := range strings.Lines(string(raw)) {
		mac, ip, _ := strings.Cut(strings.TrimSpace(line), " ")
		if a, err := netip.ParseAddr(ip); err == nil {
			ls = append(ls, lease{mac, a})
		}
	}
	slices.SortFunc(ls, func(a, b lease) int { return a.ip.Compare(b.ip) })
	return ls
}

func writeLeases(path string, ls []lease) error {
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "%s %s\n", l.mac, l.ip)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// replayOrder is the MACs to ask for, in order, so that a fresh slirpvde
// gives every recorded MAC its address again.
func replayOrder(ls []lease) []string {
	var macs []string
	next := dhcpFirst
	for _, l := range ls {
		for ; next.Less(l.ip); next = next.Next() {
			macs = append(macs, placeholderMAC(next))
		}
		macs = append(macs, l.mac)
		next = l.ip.Next()
	}
	return macs
}

// placeholderMAC holds a slot nobody known to poligon had: a locally
// administered address no VM is given.
func placeholderMAC(ip netip.Addr) string {
	return fmt.Sprintf("02:00:00:00:00:%02x", ip.As4()[3])
}

// dhcpLeases asks the network's DHCP server for a lease for each MAC, in
// order, and answers the addresses offered. It plugs into the switch with
// vde_plug, which carries frames on its stdin and stdout, each after its
// length in two bytes, and sends each DISCOVER from the MAC it is for, so
// the offer (addressed to that MAC) comes back to this plug.
func dhcpLeases(ctx context.Context, sock string, macs []string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var ips []netip.Addr
	// A vde_plug can end before its answer: a switch just started, or
	// busy dropping the port of the plug before, now and then closes a
	// new one at once. Another plug asks for the rest.
	for {
		got, err := plugAsk(ctx, sock, macs[len(ips):], len(ips))
		ips = append(ips, got...)
		var ended *plugEnded
		if err == nil || !errors.As(err, &ended) || ctx.Err() != nil {
			return ips, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// plugEnded is a vde_plug that ended before the answers it was asked for.
type plugEnded struct{ stderr string }

func (e *plugEnded) Error() string {
	if e.stderr == "" {
		return "vde_plug ended"
	}
	return "vde_plug ended: " + e.stderr
}

// plugAsk plugs one vde_plug into the switch and asks for a lease for
// each MAC in turn (the first's xid numbered from); it answers those it
// got before any error.
func plugAsk(ctx context.Context, sock string, macs []string, from int) (ips []netip.Addr, err error) {
	cmd := exec.CommandContext(ctx, "vde_plug", sock)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("vde_plug: %w", err)
	}
	defer func() {
		in.Close() // vde_plug ends at EOF on stdin
		cmd.Wait() // stderr is complete, and no longer written, after this
		var ended *plugEnded
		if errors.As(err, &ended) {
			ended.stderr = lastLines(strings.TrimSpace(stderr.String()), 3)
		}
	}()
	frames := make(chan []byte, 16)
	go func() {
		defer close(frames)
		r := bufio.NewReader(out)
		for {
			var size uint16
			if binary.Read(r, binary.BigEndian, &size) != nil {
				return
			}
			f := make([]byte, size)
			if _, err := io.ReadFull(r, f); err != nil {
				return
			}
			select {
			case frames <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	for i, mac := range macs {
		hw, err := net.ParseMAC(mac)
		if err != nil {
			return ips, err
		}
		xid := uint32(0x706f6c00 + from + i)
		ip, err := dhcpAsk(ctx, in, frames, hw, xid)
		if err != nil {
			return ips, fmt.Errorf("DHCP lease for %s: %w", mac, err)
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

// dhcpAsk sends DISCOVERs from hw until an answer with xid comes.
func dhcpAsk(ctx context.Context, w io.Writer, frames <-chan []byte, hw net.HardwareAddr, xid uint32) (netip.Addr, error) {
	f := discoverFrame(hw, xid)
	for {
		// Writes fail only when vde_plug has gone (a closed pipe).
		if err := binary.Write(w, binary.BigEndian, uint16(len(f))); err != nil {
			return netip.Addr{}, &plugEnded{}
		}
		if _, err := w.Write(f); err != nil {
			return netip.Addr{}, &plugEnded{}
		}
		resend := time.After(time.Second) // a slirpvde just started may miss the first
	wait:
		for {
			select {
			case <-ctx.Done():
				return netip.Addr{}, errors.New("no answer from slirpvde")
			case <-resend:
				break wait
			case reply, ok := <-frames:
				if !ok {
					return netip.Addr{}, &plugEnded{}
				}
				if ip, typ, ok := parseDHCPReply(reply, hw, xid); ok {
					if typ != dhcpOffer {
						return netip.Addr{}, errors.New("slirpvde has no free address (it gives out 16)")
					}
					return ip, nil
				}
			}
		}
	}
}

const (
	dhcpDiscover = 1
	dhcpOffer    = 2
	bootpLen     = 236 // the fixed part, up to the options
)

// discoverFrame is an Ethernet frame with a DHCPDISCOVER from hw.
func discoverFrame(hw net.HardwareAddr, xid uint32) []byte {
	bootp := make([]byte, bootpLen, 548)   // 548: the BOOTP minimum, options padded
	bootp[0], bootp[1], bootp[2] = 1, 1, 6 // BOOTREQUEST, Ethernet, 6-byte MAC
	binary.BigEndian.PutUint32(bootp[4:], xid)
	copy(bootp[28:], hw)
	bootp = append(bootp, 99, 130, 83, 99, 53, 1, dhcpDiscover, 255)
	bootp = bootp[:cap(bootp)]

	udp := make([]byte, 8, 8+len(bootp))
	binary.BigEndian.PutUint16(udp[0:], 68)
	binary.BigEndian.PutUint16(udp[2:], 67)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(bootp))) // checksum 0: none
	udp = append(udp, bootp...)

	ip := make([]byte, 20, 20+len(udp))
	ip[0], ip[8], ip[9] = 0x45, 64, 17 // IPv4, TTL, UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	copy(ip[16:], []byte{255, 255, 255, 255}) // from 0.0.0.0
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	ip = append(ip, udp...)

	eth := append(bytes.Repeat([]byte{0xff}, 6), hw...)
	eth = append(eth, 0x08, 0x00)
	return append(eth, ip...)
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// parseDHCPReply answers the address and message type of a DHCP reply to
// hw with xid; ok is false for any other frame.
func parseDHCPReply(f []byte, hw net.HardwareAddr, xid uint32) (ip netip.Addr, typ byte, ok bool) {
	if len(f) < 14+20 || f[12] != 0x08 || f[13] != 0x00 {
		return ip, 0, false
	}
	p := f[14:]
	ihl := int(p[0]&0x0f) * 4
	if p[9] != 17 || len(p) < ihl+8+bootpLen+4 {
		return ip, 0, false
	}
	udp := p[ihl:]
	if binary.BigEndian.Uint16(udp[2:]) != 68 {
		return ip, 0, false
	}
	b := udp[8:]
	if b[0] != 2 || binary.BigEndian.Uint32(b[4:]) != xid || !bytes.Equal(b[28:34], hw) {
		return ip, 0, false
	}
	opts := b[bootpLen+4:] // after the magic cookie
	for len(opts) >= 2 && opts[0] != 255 {
		if opts[0] == 0 {
			opts = opts[1:]
			continue
		}
		if len(opts) < 2+int(opts[1]) {
			break
		}
		if opts[0] == 53 && opts[1] == 1 {
			typ = opts[2]
		}
		opts = opts[2+int(opts[1]):]
	}
	return netip.AddrFrom4([4]byte(b[16:20])), typ, true
}
