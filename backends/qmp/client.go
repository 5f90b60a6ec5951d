// Package qmp is a client for the QEMU Machine Protocol: JSON objects over a
// stream (a unix socket here), a greeting, qmp_capabilities, then commands
// whose replies echo the command's id, with asynchronous events in between.
//
// A reader goroutine receives everything: replies go to the one command in
// flight, events into a bounded backlog that WaitEvent searches. QEMU serves
// one QMP connection per socket at a time (a second waits until the first
// closes), so a driver keeps one Client per VM.
package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poligon/poligon/backends/internal/deadline"
)

// ErrClosed is returned by calls on a client whose connection is closed:
// after Close, after a context ended mid-command, or after QEMU went away.
// Dial again.
var ErrClosed = errors.New("QMP connection closed")

// Error is an error reply: {"error":{"class","desc"}}. Commands return it
// wrapped with the command name; use errors.As.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return e.Desc }

// Event is an asynchronous QMP event. Time is QEMU's timestamp.
type Event struct {
	Name string
	Data json.RawMessage
	Time time.Time
}

// eventBacklog bounds the events kept for WaitEvent.
const eventBacklog = 1024

// Client is one QMP connection. Commands are serialized: one at a time.
type Client struct {
	conn    net.Conn
	dec     *json.Decoder
	lock    chan struct{} // held by the command in flight; waiting obeys ctx
	nextID  atomic.Uint64
	closing atomic.Bool // set before the connection is closed, whoever closes it

	mu       sync.Mutex
	pending  *call   // the command in flight
	events   []Event // the latest events, oldest first
	eventSeq uint64  // events received so far
	notify   chan struct{}
	done     chan struct{} // closed when the reader stops
	readErr  error         // why the reader stopped
}

type call struct {
	id    string
	reply chan message
}

// message is anything QEMU sends.
type message struct {
	QMP       json.RawMessage `json:"QMP"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
	ID     json.RawMessage `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *Error          `json:"error"`
}

// Dial connects to a QMP unix socket and negotiates capabilities.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: dial %s: %w", path, err)
	}
	return NewClient(ctx, conn)
}

// NewClient reads QEMU's greeting from conn and sends qmp_capabilities. The
// client owns conn from now on; it is closed when this fails.
func NewClient(ctx context.Context, conn net.Conn) (*Client, error) {
	c := &Client{
		conn:   conn,
		dec:    json.NewDecoder(conn),
		lock:   make(chan struct{}, 1),
		notify: make(chan struct{}),
		done:   make(chan struct{}),
	}
	if err := c.readGreeting(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	go c.readLoop()
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) readGreeting(ctx context.Context) error {
	unbind := deadline.Bind(ctx, c.conn, deadline.Read)
	var greeting message
	err := c.dec.Decode(&greeting)
	if unbind() {
		return fmt.Errorf("qmp: waiting for the greeting: %w", ctx.Err())
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("qmp: waiting for the greeting: %w", context.DeadlineExceeded)
		}
		return fmt.Errorf("qmp: reading the greeting: %w", err)
	}
	if greeting.QMP == nil {
		return errors.New("qmp: the peer did not greet with {\"QMP\": ...}: not a QMP socket?")
	}
	return nil
}

// closeConn closes the connection; commands fail with ErrClosed from now on.
func (c *Client) closeConn() error {
	c.closing.Store(true)
	return c.conn.Close()
}

// Close closes the connection; a command in flight fails with ErrClosed.
func (c *Client) Close() error {
	err := c.closeConn()
	<-c.done
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Execute runs one command. args and result may be nil; result receives the
// "return" value. Events arriving meanwhile are kept for WaitEvent. An error
// reply is a *Error wrapped with the command name. If ctx ends before the
// reply, the connection is closed (its stream would be out of step) and the
// error says so: dial again.
func (c *Client) Execute(ctx context.Context, command string, args, result any) error {
	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: waiting for the connection: %w", command, ctx.Err())
	}
	defer func() { <-c.lock }()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}

	n := c.nextID.Add(1)
	line, err := json.Marshal(struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
		ID        uint64 `json:"id"`
	}{command, args, n})
	if err != nil {
		return fmt.Errorf("qmp %s: encoding arguments: %w", command, err)
	}
	pc := &call{id: strconv.FormatUint(n, 10), reply: make(chan message, 1)}
	c.mu.Lock()
	if c.readErr != nil || c.closing.Load() {
		c.mu.Unlock()
		return c.closedError(command)
	}
	c.pending = pc
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.pending = nil
		c.mu.Unlock()
	}()

	if err := c.write(ctx, append(line, '\n')); err != nil {
		c.closeConn() // a partial write leaves QEMU's parser mid-object
		if ctx.Err() != nil {
			return c.abandoned(command, ctx.Err())
		}
		if errors.Is(err, net.ErrClosed) {
			return c.closedError(command)
		}
		return fmt.Errorf("qmp %s: sending: %w (%w)", command, err, ErrClosed)
	}

	var m message
	select {
	case m = <-pc.reply:
	case <-c.done:
		select {
		case m = <-pc.reply: // the reply came just before the connection ended (quit)
		default:
			if ctx.Err() != nil {
				return c.abandoned(command, ctx.Err())
			}
			return c.closedError(command)
		}
	case <-ctx.Done():
		c.closeConn()
		return c.abandoned(command, ctx.Err())
	}
	if m.Error != nil {
		return fmt.Errorf("qmp %s: %w", command, m.Error)
	}
	if result != nil {
		if err := json.Unmarshal(m.Return, result); err != nil {
			return fmt.Errorf("qmp %s: decoding the reply: %w", command, err)
		}
	}
	return nil
}

// write sends b, giving up at ctx's deadline or cancellation.
func (c *Client) write(ctx context.Context, b []byte) error {
	unbind := deadline.Bind(ctx, c.conn, deadline.Write)
	_, err := c.conn.Write(b)
	unbind()
	return err
}

func (c *Client) abandoned(command string, cause error) error {
	return fmt.Errorf("qmp %s: %w; the connection is closed, dial again (%w)", command, cause, ErrClosed)
}

func (c *Client) closedError(command string) error {
	return fmt.Errorf("qmp %s: %w", command, c.closedCause())
}

// closedCause is ErrClosed with the reason the connection ended, if known.
func (c *Client) closedCause() error {
	c.mu.Lock()
	why := c.readErr
	c.mu.Unlock()
	if why == nil || errors.Is(why, net.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("%w (%v)", ErrClosed, why)
}

// readLoop receives every message until the connection ends.
func (c *Client) readLoop() {
	var err error
	for {
		var m message
		if err = c.dec.Decode(&m); err != nil {
			break
		}
		if m.Event != "" {
			c.addEvent(Event{
				Name: m.Event,
				Data: m.Data,
				Time: time.Unix(m.Timestamp.Seconds, m.Timestamp.Microseconds*1000),
			})
			continue
		}
		if err = c.deliver(m); err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("QEMU closed the connection")
	}
	c.closeConn()
	c.mu.Lock()
	c.readErr = err
	close(c.done)
	c.mu.Unlock()
}

// deliver hands a reply to the command in flight. A reply nobody waits for,
// or for another id, means the stream is out of step: give up on it.
func (c *Client) deliver(m message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		return fmt.Errorf("unexpected reply with no command in flight: id %s", m.ID)
	}
	if string(m.ID) != c.pending.id {
		desc := ""
		if m.Error != nil {
			desc = ": " + m.Error.Desc
		}
		return fmt.Errorf("reply for id %s while waiting for id %s%s", m.ID, c.pending.id, desc)
	}
	c.pending.reply <- m
	c.pending = nil
	return nil
}
