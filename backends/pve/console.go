package pve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/rfb"
)

// wsHandshakeTimeout keeps the websocket well inside the 10 s PVE gives a
// vncproxy ticket.
const wsHandshakeTimeout = 8 * time.Second

// maxWSPayload is the most pveproxy takes in one websocket frame.
const maxWSPayload = 128 << 10

// console is one cached VNC client of a VM.
type console struct {
	client *rfb.Client
	idle   *time.Timer
}

// Console answers the VM's screen: one RFB client per VM and token, kept
// open across calls and reconnecting by itself (every dial is a fresh
// vncproxy + websocket). It is closed after 15 idle minutes (without a
// Console call), when the VM is destroyed, by CloseConsoles, and by itself
// when a redial finds the VM stopped (the next Console call opens a new
// one).
func (b *Backend) Console(ctx context.Context, vmid int) (backends.Screen, error) {
	s := b.tok
	for {
		s.mu.Lock()
		if c := s.consoles[vmid]; c != nil {
			select {
			case <-c.client.Done(): // its VM stopped: drop it, open another
				s.mu.Unlock()
				s.dropConsole(vmid, c)
				continue
			default:
			}
			c.idle.Reset(consoleIdle)
			s.mu.Unlock()
			return c.client, nil
		}
		if s.opening == nil {
			s.opening = map[int]chan struct{}{}
		}
		if ch, busy := s.opening[vmid]; busy {
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("pve: console of vmid %d: waiting for another caller to open it: %w", vmid, ctx.Err())
			}
		}
		ch := make(chan struct{})
		s.opening[vmid] = ch
		s.mu.Unlock()

		d := &consoleDialer{b: b, vmid: vmid}
		client, err := rfb.Connect(ctx, rfb.Config{
			Dial:         d.dial,
			PasswordFunc: d.password,
			Encodings:    []int32{rfb.EncodingZRLE, rfb.EncodingRaw}, // ZRLE: a websocket is no local socket
			Logger:       b.log.With("vmid", vmid),
			Dump:         b.dump,
		})
		s.mu.Lock()
		delete(s.opening, vmid)
		close(ch)
		if err == nil {
			c := &console{client: client}
			c.idle = time.AfterFunc(consoleIdle, func() { s.dropConsole(vmid, c) })
			s.consoles[vmid] = c
			go func() { <-client.Done(); s.dropConsole(vmid, c) }()
		}
		s.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("pve: console of vmid %d: %w", vmid, err)
		}
		b.log.Info("pve: console opened", "vmid", vmid)
		return client, nil
	}
}

// dropConsole closes c if it is still vmid's console.
func (s *tokenState) dropConsole(vmid int, c *console) {
	s.mu.Lock()
	if s.consoles[vmid] != c {
		s.mu.Unlock()
		return
	}
	delete(s.consoles, vmid)
	s.mu.Unlock()
	c.idle.Stop()
	c.client.Close()
}

// closeConsoles closes the consoles of a VM that every token opened.
func (b *Backend) closeConsoles(vmid int) {
	for _, s := range b.cl.allTokens() {
		s.mu.Lock()
		c := s.consoles[vmid]
		s.mu.Unlock()
		if c != nil {
			s.dropConsole(vmid, c)
		}
	}
}

// CloseConsoles closes the consoles this token opened (the ones every
// Backend of the same token shares): for shutdown and tests, not for the
// end of a request.
func (b *Backend) CloseConsoles() {
	s := b.tok
	s.mu.Lock()
	open := make(map[int]*console, len(s.consoles))
	for id, c := range s.consoles {
		open[id] = c
	}
	s.mu.Unlock()
	for id, c := range open {
		s.dropConsole(id, c)
	}
}

// SendKey presses a key combination by qemu name ("ctrl-alt-delete")
// through PUT .../sendkey, without a console.
func (b *Backend) SendKey(ctx context.Context, vmid int, key string) error {
	return b.withVM(ctx, vmid, func(node string) error {
		return b.put(ctx, fmt.Sprintf("send key %s to vmid %d", key, vmid), vmPath(node, vmid)+"/sendkey",
			map[string]any{"key": key}, nil)
	})
}

// consoleDialer opens one websocket per call: vncproxy for a ticket and a
// one-time VNC password, then the vncwebsocket with the token header.
type consoleDialer struct {
	b    *Backend
	vmid int

	mu   sync.Mutex
	pass string
}

type vncProxy struct {
	Port     flexInt `json:"port"`
	Ticket   string  `json:"ticket"`
	Password string  `json:"password"`
}

func (d *consoleDialer) password() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pass
}

// dial asks for a ticket and opens its websocket; a ticket refused
// (expired: PVE allows 10 s) is tried again with a fresh vncproxy.
func (d *consoleDialer) dial(ctx context.Context) (net.Conn, error) {
	b := d.b
	for attempt := 1; ; attempt++ {
		var node string
		var proxy vncProxy
		err := b.withVM(ctx, d.vmid, func(n string) error {
			node = n
			// A GET first: the RFB client redials a stopped VM every few
			// seconds, and every vncproxy is a task in PVE's log.
			st, err := b.status(ctx, n, d.vmid)
			if err != nil {
				return err
			}
			if st.Status != "running" {
				return fmt.Errorf("pve: console of vmid %d: the VM is %s: %w", d.vmid, st.state(), backends.ErrNotRunning)
			}
			return b.post(ctx, fmt.Sprintf("open the console of vmid %d", d.vmid), vmPath(n, d.vmid)+"/vncproxy",
				map[string]any{"websocket": 1, "generate-password": 1}, &proxy)
		})
		if err != nil {
			return nil, err
		}
		conn, err := b.dialWebsocket(ctx, node, d.vmid, proxy)
		if err == nil {
			pass := proxy.Password
			if pass == "" {
				pass = proxy.Ticket // PVE's password without generate-password
			}
			if len(pass) > 8 {
				pass = pass[:8] // VNC authentication uses 8 characters
			}
			d.mu.Lock()
			d.pass = pass
			d.mu.Unlock()
			return conn, nil
		}
		var ae *APIError
		if attempt < 3 && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized && ctx.Err() == nil {
			b.log.Warn("pve: console ticket refused; asking for a fresh one", "vmid", d.vmid, "attempt", attempt, "err", err)
			continue
		}
		return nil, err
	}
}

// dialWebsocket opens wss://host/api2/json/nodes/N/qemu/V/vncwebsocket with
// the token header (go-proxmox refuses tokens there).
func (b *Backend) dialWebsocket(ctx context.Context, node string, vmid int, proxy vncProxy) (*wsConn, error) {
	path := "/api2/json" + vmPath(node, vmid) + "/vncwebsocket"
	u := url.URL{Scheme: "wss", Host: b.host, Path: path, RawQuery: url.Values{
		"port": {strconv.FormatInt(int64(proxy.Port), 10)}, "vncticket": {proxy.Ticket}}.Encode()}
	dialer := websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		TLSClientConfig:  b.tls.config.Clone(),
		HandshakeTimeout: wsHandshakeTimeout,
		Subprotocols:     []string{"binary"},
		ReadBufferSize:   64 << 10,
		WriteBufferSize:  16 << 10,
	}
	op := fmt.Sprintf("open the console websocket of vmid %d", vmid)
	ws, res, err := dialer.DialContext(ctx, u.String(), http.Header{"Authorization": {"PVEAPIToken=" + b.token}})
	if err != nil {
		if res != nil && res.StatusCode >= 400 {
			return nil, b.wrap(op, handshakeError(res, strings.TrimPrefix(path, "/api2/json"), b.scrub))
		}
		return nil, b.wrap(op, err)
	}
	return &wsConn{ws: ws}, nil
}

// handshakeError reads PVE's refusal of a websocket upgrade.
func handshakeError(res *http.Response, path string, scrub func(string) string) *APIError {
	var doc struct {
		Message string `json:"message"`
	}
	if res.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		_ = json.Unmarshal(body, &doc)
	}
	msg := strings.TrimSpace(doc.Message)
	if msg == "" {
		msg = strings.TrimSpace(strings.TrimPrefix(res.Status, strconv.Itoa(res.StatusCode)))
	}
	return &APIError{Method: "GET", Path: path, Status: res.StatusCode, Message: scrub(msg)}
}
