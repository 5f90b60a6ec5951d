package rfb

import (
	"bufio"
	"bytes"
	"crypto/des"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"strings"
)

// ErrAuth is wrapped by the error of a handshake whose VNC password the server
// rejected. Its text never contains the password.
var ErrAuth = errors.New("the VNC password was rejected")

// Security types.
const (
	securityInvalid = 0
	securityNone    = 1
	securityVNCAuth = 2
)

// maxReasonLen bounds the reason strings and desktop names we keep.
const maxReasonLen = 4096

// serverInit is what the server said about its screen.
type serverInit struct {
	width, height int
	name          string
	version       string
}

// handshake runs ProtocolVersion, Security and Init on a fresh connection.
// An empty password means the server must offer security type None.
func handshake(conn net.Conn, r *bufio.Reader, password string) (serverInit, error) {
	var si serverInit
	var version [12]byte
	if _, err := io.ReadFull(r, version[:]); err != nil {
		return si, fmt.Errorf("reading the RFB protocol version: %w", err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(string(version[:]), "RFB %03d.%03d\n", &major, &minor); err != nil || major < 3 {
		return si, fmt.Errorf("not an RFB server: it greeted with %q", version[:])
	}
	// 3.8 for any newer server; 3.7 and 3.3 where the server is that old (3.5
	// is an old 3.3; 3.889 is Apple's, 3.8 compatible).
	switch {
	case major > 3 || minor >= 8:
		minor = 8
	case minor == 7:
	default:
		minor = 3
	}
	si.version = fmt.Sprintf("3.%d", minor)
	if _, err := fmt.Fprintf(conn, "RFB 003.%03d\n", minor); err != nil {
		return si, fmt.Errorf("sending the protocol version: %w", err)
	}

	secType, err := negotiateSecurity(conn, r, minor, password)
	if err != nil {
		return si, err
	}
	if secType == securityVNCAuth {
		if err := vncAuth(conn, r, password); err != nil {
			return si, err
		}
	}
	// SecurityResult: always for VNC auth; for None only from 3.8 on.
	if secType == securityVNCAuth || minor >= 8 {
		if err := readSecurityResult(r, minor, secType); err != nil {
			return si, err
		}
	}

	if _, err := conn.Write([]byte{1}); err != nil { // ClientInit: shared
		return si, fmt.Errorf("sending ClientInit: %w", err)
	}
	var init [24]byte
	if _, err := io.ReadFull(r, init[:]); err != nil {
		return si, fmt.Errorf("reading ServerInit: %w", err)
	}
	si.width = int(binary.BigEndian.Uint16(init[0:]))
	si.height = int(binary.BigEndian.Uint16(init[2:]))
	name, err := readString(r, binary.BigEndian.Uint32(init[20:]))
	if err != nil {
		return si, fmt.Errorf("reading the desktop name: %w", err)
	}
	si.name = name
	return si, nil
}

// negotiateSecurity picks VNC auth when there is a password and None when
// there is not, and answers the chosen type.
func negotiateSecurity(conn net.Conn, r *bufio.Reader, minor int, password string) (byte, error) {
	if minor == 3 { // the server decides
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, fmt.Errorf("reading the security type: %w", err)
		}
		t := binary.BigEndian.Uint32(b[:])
		switch t {
		case securityInvalid:
			return 0, refused(r)
		case securityNone, securityVNCAuth:
			if t == securityVNCAuth && password == "" {
				return 0, errors.New("the VNC server requires a password (VNC authentication) but none was configured")
			}
			return byte(t), nil
		default:
			return 0, fmt.Errorf("the VNC server demands security type %d, which this client does not speak (it speaks None and VNC authentication)", t)
		}
	}
	count, err := r.ReadByte()
	if err != nil {
		return 0, fmt.Errorf("reading the security types: %w", err)
	}
	if count == 0 {
		return 0, refused(r)
	}
	types := make([]byte, count)
	if _, err := io.ReadFull(r, types); err != nil {
		return 0, fmt.Errorf("reading the security types: %w", err)
	}
	hasNone, hasVNC := bytes.IndexByte(types, securityNone) >= 0, bytes.IndexByte(types, securityVNCAuth) >= 0
	var choice byte
	switch {
	case password != "" && hasVNC:
		choice = securityVNCAuth
	case hasNone:
		choice = securityNone // a password is not needed where the server asks none
	case hasVNC:
		return 0, errors.New("the VNC server requires a password (VNC authentication) but none was configured")
	default:
		return 0, fmt.Errorf("the VNC server offers security types %v; this client speaks only None (1) and VNC authentication (2)", types)
	}
	if _, err := conn.Write([]byte{choice}); err != nil {
		return 0, fmt.Errorf("choosing the security type: %w", err)
	}
	return choice, nil
}

// vncAuth answers the 16-byte challenge encrypted with DES-ECB under the
// password: its first 8 bytes, zero-padded, each byte bit-reversed (the VNC
// quirk of the original d3des code).
func vncAuth(conn net.Conn, r *bufio.Reader, password string) error {
	var challenge [16]byte
	if _, err := io.ReadFull(r, challenge[:]); err != nil {
		return fmt.Errorf("reading the VNC authentication challenge: %w", err)
	}
	response := vncAuthResponse(challenge, password)
	if _, err := conn.Write(response[:]); err != nil {
		return fmt.Errorf("sending the VNC authentication response: %w", err)
	}
	return nil
}

func vncAuthResponse(challenge [16]byte, password string) [16]byte {
	var key [8]byte
	copy(key[:], password)
	for i := range key {
		key[i] = bits.Reverse8(key[i])
	}
	block, err := des.NewCipher(key[:])
	if err != nil {
		panic(err) // only on a key length other than 8
	}
	var out [16]byte
	block.Encrypt(out[:8], challenge[:8])
	block.Encrypt(out[8:], challenge[8:])
	return out
}

func readSecurityResult(r *bufio.Reader, minor int, secType byte) error {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if secType == securityVNCAuth {
			// Servers before 3.8 (and some later) just hang up on a wrong password.
			return fmt.Errorf("%w (the server closed the connection: %v)", ErrAuth, err)
		}
		return fmt.Errorf("reading the security result: %w", err)
	}
	if binary.BigEndian.Uint32(b[:]) == 0 {
		return nil
	}
	reason := ""
	if minor >= 8 {
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); err == nil {
			reason, _ = readString(r, binary.BigEndian.Uint32(n[:]))
		}
	}
	if secType == securityVNCAuth {
		if reason != "" {
			return fmt.Errorf("%w (server: %s)", ErrAuth, reason)
		}
		return ErrAuth
	}
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Errorf("the VNC server refused the connection: %s", reason)
}

// refused reads the reason string of a connection the server refuses.
func refused(r *bufio.Reader) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return fmt.Errorf("the VNC server refused the connection and gave no reason: %w", err)
	}
	reason, err := readString(r, binary.BigEndian.Uint32(n[:]))
	if err != nil {
		return fmt.Errorf("the VNC server refused the connection; reading its reason: %w", err)
	}
	return fmt.Errorf("the VNC server refused the connection: %s", reason)
}

// readString reads n bytes, keeps at most maxReasonLen of them and drops a
// trailing NUL (QEMU's reason strings carry one).
func readString(r *bufio.Reader, n uint32) (string, error) {
	keep := min(n, maxReasonLen)
	buf := make([]byte, keep)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	if _, err := io.CopyN(io.Discard, r, int64(n-keep)); err != nil {
		return "", err
	}
	return strings.TrimRight(string(buf), "\x00"), nil
}
