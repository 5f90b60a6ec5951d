// Package qga is a client for qemu-guest-agent: newline-delimited JSON over a
// stream (the host end of QEMU's virtio-serial chardev, or qemu-ga's own
// unix-listen socket).
//
// The host end of the chardev accepts connections whether or not an agent runs
// in the guest, and the channel outlives host connections, so the stream may
// hold replies nobody waited for. The client therefore re-synchronises with
// guest-sync-delimited (a 0xFF sentinel protocol) before the first command and
// after any call that did not read its whole reply. Every call obeys its
// context; a call that got no answer at all fails with an error wrapping
// ErrNoAgent and the context's error.
package qga

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/internal/deadline"
)

// ErrNoAgent means nothing answered on the agent channel before the context
// ended: no agent runs in the guest, or it is hung. It is the backends-wide
// backends.ErrAgentNotRunning, so errors.Is works with either name.
var ErrNoAgent = backends.ErrAgentNotRunning

// ErrClosed is returned by calls on a client after Close or after the
// connection broke; dial again.
var ErrClosed = errors.New("agent connection closed")

// maxReplySize bounds one reply line. The largest legitimate replies are
// guest-exec-status with two 16 MiB outputs (about 45 MB of base64) and
// guest-file-read of readChunk bytes; a guest sending more is not trusted.
const maxReplySize = 96 << 20

// Error is an error reply of the agent: {"error":{"class","desc"}}.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return e.Desc }

// Client talks to one agent. Calls are serialized: one command at a time.
type Client struct {
	conn   net.Conn
	in     *countingReader
	r      *bufio.Reader
	lock   chan struct{} // held for a whole call, so waiting obeys ctx
	closed atomic.Bool

	// Guarded by lock.
	stale  bool  // the stream may hold data of an earlier call
	broken error // the connection failed for good

	pendingMu     sync.Mutex
	pendingCloses []int64 // file handles whose close could not be sent in time
}

// Dial connects to the agent's unix socket.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qga: dial %s: %w", path, err)
	}
	return NewClient(conn), nil
}

// NewClient wraps a connection to an agent; the client owns it from now on.
// Nothing is sent until the first call, which synchronises first.
func NewClient(conn net.Conn) *Client {
	in := &countingReader{r: conn}
	return &Client{
		conn:  conn,
		in:    in,
		r:     bufio.NewReaderSize(in, 64<<10),
		lock:  make(chan struct{}, 1),
		stale: true,
	}
}

// Close closes the connection; a call in progress fails.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.conn.Close()
}

// Execute runs one agent command. args and result may be nil; result receives
// the "return" value. An error reply is a *Error wrapped with the command name.
func (c *Client) Execute(ctx context.Context, command string, args, result any) error {
	return c.withLock(ctx, command, func() error {
		return c.execute(ctx, command, args, result)
	})
}

// withLock runs f as one call: it waits for the connection (or ctx), applies
// ctx to the connection's I/O and runs f.
func (c *Client) withLock(ctx context.Context, command string, f func() error) error {
	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("qga %s: waiting for the connection: %w", command, ctx.Err())
	}
	defer func() { <-c.lock }()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("qga %s: %w", command, err)
	}
	if c.closed.Load() {
		return fmt.Errorf("qga %s: %w", command, ErrClosed)
	}
	if c.broken != nil {
		return fmt.Errorf("qga %s: %w (%v)", command, ErrClosed, c.broken)
	}
	defer deadline.Bind(ctx, c.conn, deadline.Both)()
	return f()
}

// execute sends one command and reads its reply; the caller holds the lock.
func (c *Client) execute(ctx context.Context, command string, args, result any) error {
	if err := c.prepare(ctx); err != nil {
		return fmt.Errorf("qga %s: %w", command, err)
	}
	line, err := encodeCommand(command, args)
	if err != nil {
		return fmt.Errorf("qga %s: encoding arguments: %w", command, err)
	}
	c.stale = true // until the whole reply is read
	before := c.in.n.Load()
	if _, err := c.conn.Write(line); err != nil {
		return fmt.Errorf("qga %s: %w", command, c.ioError(ctx, "sending the command", err, false))
	}
	reply, err := c.readLine()
	if err != nil {
		doing := "reading the reply"
		if c.in.n.Load() == before {
			doing = "no reply"
		}
		return fmt.Errorf("qga %s: %w", command, c.ioError(ctx, doing, err, c.in.n.Load() == before))
	}
	c.stale = false
	// One pass over the reply: result (a pointer) sits in the interface field,
	// so encoding/json decodes "return" straight into it.
	resp := struct {
		Return any    `json:"return"`
		Error  *Error `json:"error"`
	}{Return: result}
	if err := json.Unmarshal(reply, &resp); err != nil {
		c.stale = true
		return fmt.Errorf("qga %s: malformed reply %.200q: %w", command, reply, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("qga %s: %w", command, resp.Error)
	}
	if result != nil && !bytes.Contains(reply, []byte(`"return"`)) {
		return fmt.Errorf("qga %s: reply without a return value: %.200q", command, reply)
	}
	return nil
}

// prepare readies the stream for a command: it re-synchronises if earlier
// data may be pending and closes file handles earlier calls had to leave open.
func (c *Client) prepare(ctx context.Context) error {
	if c.stale {
		if err := c.sync(ctx); err != nil {
			return err
		}
	}
	c.pendingMu.Lock()
	handles := c.pendingCloses
	c.pendingCloses = nil
	c.pendingMu.Unlock()
	for i, h := range handles {
		// The handle may be gone already (agent restarted): ignore agent errors.
		var agentErr *Error
		if err := c.execute(ctx, "guest-file-close", map[string]int64{"handle": h}, nil); err != nil && !errors.As(err, &agentErr) {
			c.pendingMu.Lock()
			c.pendingCloses = append(c.pendingCloses, handles[i:]...)
			c.pendingMu.Unlock()
			return err
		}
	}
	return nil
}

// ioError classifies a failed read or write; doing says what failed ("no
// reply", "reading the reply"). The stream stays usable after a timeout (the
// next call re-synchronises); any other failure breaks it.
func (c *Client) ioError(ctx context.Context, doing string, err error, nothingReceived bool) error {
	c.stale = true
	if errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() != nil {
		cause := ctx.Err()
		if cause == nil { // the connection deadline fired a moment before ctx's timer
			cause = context.DeadlineExceeded
		}
		if nothingReceived {
			return fmt.Errorf("%w (%s): %w", ErrNoAgent, doing, cause)
		}
		return fmt.Errorf("%s: %w", doing, cause)
	}
	if errors.Is(err, errReplyTooLarge) {
		return err
	}
	c.broken = err
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: the agent side closed the connection: %w", doing, ErrClosed)
	}
	if c.closed.Load() || errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("%s: %w", doing, err)
}

func encodeCommand(command string, args any) ([]byte, error) {
	line, err := json.Marshal(struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
	}{command, args})
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}

// countingReader counts the bytes read from the connection, so a timeout can
// tell "nothing answered" from "the answer was slow".
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n.Add(int64(n))
	return n, err
}
