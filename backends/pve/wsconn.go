package pve

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// wsConn is a websocket as a net.Conn: reads see the payload of binary
// frames as one stream, writes go out as binary frames of at most 128 KiB.
// One reader and one writer may run at a time (what the RFB client does).
type wsConn struct {
	ws *websocket.Conn

	rmu  sync.Mutex
	r    io.Reader // the frame being read
	rerr error     // sticky: gorilla panics on reads after a failure

	wmu sync.Mutex
}

var _ net.Conn = (*wsConn)(nil)

func (c *wsConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if c.rerr != nil {
			return 0, c.rerr
		}
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				c.rerr = err
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				continue // pveproxy sends binary frames only
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if err == io.EOF {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		if err != nil {
			c.rerr = err
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	written := 0
	for written < len(p) {
		chunk := p[written:min(len(p), written+maxWSPayload)]
		if err := c.ws.WriteMessage(websocket.BinaryMessage, chunk); err != nil {
			return written, err
		}
		written += len(chunk)
	}
	return written, nil
}

// Close says goodbye when it can, quickly, and closes the connection.
func (c *wsConn) Close() error {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
	return c.ws.Close()
}

func (c *wsConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

func (c *wsConn) SetDeadline(t time.Time) error {
	return c.ws.NetConn().SetDeadline(t)
}

func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
