package qmp

import (
	"context"
	"fmt"
	"time"
)

func (c *Client) addEvent(ev Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.events) == eventBacklog {
		copy(c.events, c.events[1:])
		c.events = c.events[:eventBacklog-1]
	}
	c.events = append(c.events, ev)
	c.eventSeq++
	close(c.notify) // wake every waiter
	c.notify = make(chan struct{})
}

// WaitEvent answers the first event called name with a timestamp at or after
// since (the last 1024 events are kept, including those that arrived while a
// command was in flight), or waits for the next one. A zero since accepts any
// kept event. Events kept from before the connection ended are still found.
func (c *Client) WaitEvent(ctx context.Context, name string, since time.Time) (Event, error) {
	since = since.Truncate(time.Microsecond) // QEMU stamps events in microseconds
	checked := 0                             // events already searched, counted from the first ever
	for {
		c.mu.Lock()
		first := int(c.eventSeq) - len(c.events) // sequence number of c.events[0]
		for i := max(checked-first, 0); i < len(c.events); i++ {
			if ev := c.events[i]; ev.Name == name && !ev.Time.Before(since) {
				c.mu.Unlock()
				return ev, nil
			}
		}
		checked = int(c.eventSeq)
		notify, done := c.notify, c.done
		c.mu.Unlock()

		select {
		case <-notify:
		case <-done:
			c.mu.Lock()
			more := int(c.eventSeq) > checked
			c.mu.Unlock()
			if more {
				continue // events that came just before the end
			}
			return Event{}, fmt.Errorf("qmp: waiting for event %s: %w", name, c.closedCause())
		case <-ctx.Done():
			return Event{}, fmt.Errorf("qmp: waiting for event %s: %w", name, ctx.Err())
		}
	}
}

// eventsSeen is the count of events received so far, for waitForEvents.
func (c *Client) eventsSeen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eventSeq
}

// waitForEvents blocks until more than seen events have arrived, the
// connection ends, ctx ends or timeout passes.
func (c *Client) waitForEvents(ctx context.Context, seen uint64, timeout time.Duration) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		if c.eventSeq > seen {
			c.mu.Unlock()
			return
		}
		notify := c.notify
		c.mu.Unlock()
		select {
		case <-notify:
		case <-c.done:
			return
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		}
	}
}
