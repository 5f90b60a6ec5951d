package pvetest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
)

// maxFrame is the largest websocket payload pveproxy sends.
const maxFrame = 128 << 10

// ticket is a vncproxy answer waiting for its websocket: like PVE's
// one-shot VNC listener it serves one connection, within the ticket's
// lifetime, to the token that asked for it.
type ticket struct {
	vmid    int
	port    int
	tokenID string
	created time.Time
	used    bool
}

// vncproxy is POST .../vncproxy with websocket=1: it answers a ticket and a
// port (a string, as PVE sends it) and, with generate-password=1, the VNC
// password. Every VM's console is the one real QEMU's screen, whose
// password is fixed for the server's lifetime.
func (s *Server) vncproxy(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Console")
	if err != nil {
		return nil, err
	}
	ws, err := c.boolean("websocket", false)
	if err != nil {
		return nil, err
	}
	gen, err := c.boolean("generate-password", false)
	if err != nil {
		return nil, err
	}
	switch {
	case !ws:
		return nil, fail(500, "pvetest models vncproxy with websocket=1 only")
	case !v.running:
		return nil, fail(500, "VM %d not running", v.id)
	case s.console == nil:
		return nil, fail(500, "pvetest: no VNC server (start the test server with Options.Console)")
	}
	created := time.Now()
	if s.expireNext > 0 {
		s.expireNext--
		created = created.Add(-s.opts.TicketTTL - time.Second)
	}
	port := 5900 + len(s.tickets)%100
	tk := fmt.Sprintf("PVEVNC:%08X::%s", created.Unix(), randomHex(32))
	s.tickets[tk] = &ticket{vmid: v.id, port: port, tokenID: c.tok.id, created: created}
	upid := s.startTask(c, v.node, "vncproxy", strconv.Itoa(v.id), nil, nil)
	out := map[string]any{"user": c.tok.id, "ticket": tk, "port": strconv.Itoa(port), "upid": upid, "cert": s.certPEM}
	if gen {
		out["password"] = s.vncPassword
	}
	return out, nil
}

// vncWebsocket is GET .../vncwebsocket?port=P&vncticket=T: it checks the
// token, the ticket and its age, upgrades to a websocket ("binary"
// subprotocol) and proxies binary frames to the QEMU VNC socket.
func (s *Server) vncWebsocket(c *call) {
	conn, vmid, err := s.acceptConsole(c)
	if err != nil {
		s.writeError(c.w, err)
		return
	}
	upgrader := websocket.Upgrader{Subprotocols: []string{"binary"}, CheckOrigin: func(*http.Request) bool { return true }}
	ws, err := upgrader.Upgrade(c.w, c.r, nil)
	if err != nil {
		conn.Close()
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		conn.Close()
		return
	}
	s.wsConns[ws] = vmid
	s.wsAccepted++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.wsConns, ws)
		s.mu.Unlock()
		ws.Close()
		conn.Close()
	}()
	go func() { // QEMU -> client
		defer ws.Close()
		buf := make([]byte, maxFrame)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for { // client -> QEMU
		typ, r, err := ws.NextReader()
		if err != nil {
			return
		}
		if typ != websocket.BinaryMessage {
			continue
		}
		if _, err := io.Copy(conn, r); err != nil {
			return
		}
	}
}

// acceptConsole checks a vncwebsocket request and dials the VNC server.
func (s *Server) acceptConsole(c *call) (net.Conn, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Console")
	if err != nil {
		return nil, 0, err
	}
	port, err := c.integer("port", 0)
	if err != nil {
		return nil, 0, err
	}
	tk := s.tickets[c.str("vncticket")]
	switch {
	case tk == nil || tk.port != port || tk.vmid != v.id || tk.tokenID != c.tok.id:
		return nil, 0, fail(401, "permission denied - invalid vnc ticket")
	case time.Since(tk.created) > s.opts.TicketTTL:
		return nil, 0, fail(401, "permission denied - invalid vnc ticket")
	case tk.used:
		return nil, 0, fail(500, "websocket proxy: unable to connect to port %d: Connection refused", port)
	case !v.running:
		return nil, 0, fail(500, "VM %d not running", v.id)
	case !slices.Contains(websocketProtocols(c), "binary"):
		return nil, 0, fail(400, "websocket: the 'binary' subprotocol is required")
	}
	tk.used = true
	conn, err := net.Dial("unix", s.console.vnc)
	if err != nil {
		return nil, 0, fail(500, "websocket proxy: unable to connect to the VNC server: %v", err)
	}
	return conn, v.id, nil
}

// dropConsolesOfLocked closes the console websockets of a VM whose QEMU
// went away (it stopped). s.mu is held.
func (s *Server) dropConsolesOfLocked(vmid int) {
	for ws, id := range s.wsConns {
		if id == vmid {
			ws.NetConn().Close()
		}
	}
}

func websocketProtocols(c *call) []string { return websocket.Subprotocols(c.r) }

// DropConsoles closes every live console websocket, as when pveproxy
// restarts or the network drops, and answers how many it closed.
func (s *Server) DropConsoles() int {
	s.mu.Lock()
	conns := make([]*websocket.Conn, 0, len(s.wsConns))
	for ws := range s.wsConns {
		conns = append(conns, ws)
	}
	s.mu.Unlock()
	for _, ws := range conns {
		ws.NetConn().Close()
	}
	return len(conns)
}

// ConsoleConnections answers how many console websockets are open now and
// how many were accepted in all.
func (s *Server) ConsoleConnections() (open, accepted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.wsConns), s.wsAccepted
}

// OpenConsolesAfter answers how many console websockets are still open
// once they all closed or timeout passed: the server notices a client's
// close on its own goroutine, a moment after the client.
func (s *Server) OpenConsolesAfter(timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		open, _ := s.ConsoleConnections()
		if open == 0 || time.Now().After(deadline) {
			return open
		}
		time.Sleep(20 * time.Millisecond)
	}
}
