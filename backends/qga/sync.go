package qga

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
)

// sentinel precedes the reply to guest-sync-delimited. It never occurs in
// valid UTF-8, so it cannot appear inside any other reply; sent to the agent it
// resets its JSON parser (which answers that with a parse error, discarded).
const sentinel = 0xFF

var errReplyTooLarge = fmt.Errorf("reply larger than %d MiB", maxReplySize>>20)

// Sync re-synchronises the stream: whatever earlier calls left behind (stale
// replies, a half-sent command) is discarded. A missing agent makes it fail
// with an error wrapping ErrNoAgent and ctx's error.
func (c *Client) Sync(ctx context.Context) error {
	return c.withLock(ctx, "guest-sync-delimited", func() error {
		if err := c.sync(ctx); err != nil {
			return fmt.Errorf("qga: %w", err)
		}
		return nil
	})
}

func (c *Client) sync(ctx context.Context) error {
	const command = "guest-sync-delimited"
	c.stale = true
	id := rand.Int64N(1<<53) + 1 // fresh each time: an old sync's reply must not match
	line, err := encodeCommand(command, map[string]int64{"id": id})
	if err != nil {
		return err
	}
	if _, err := c.conn.Write(append([]byte{sentinel}, line...)); err != nil {
		return c.syncError(ctx, err)
	}
	for {
		if err := c.skipPastSentinel(); err != nil {
			return c.syncError(ctx, err)
		}
		reply, err := c.readLine()
		if err != nil {
			return c.syncError(ctx, err)
		}
		var resp struct {
			Return *int64 `json:"return"`
		}
		if json.Unmarshal(bytes.TrimSpace(reply), &resp) == nil && resp.Return != nil && *resp.Return == id {
			c.stale = false
			return nil
		}
		// The reply of an earlier, abandoned sync: keep looking.
	}
}

// syncError reports a failed sync; running out of time here means nothing
// answered the sync, which is what "no agent" looks like.
func (c *Client) syncError(ctx context.Context, err error) error {
	return c.ioError(ctx, "no answer to guest-sync-delimited", err, true)
}

// skipPastSentinel discards input up to and including the next 0xFF.
func (c *Client) skipPastSentinel() error {
	for {
		_, err := c.r.ReadSlice(sentinel)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// readLine reads one reply line (the agent ends each with '\n').
func (c *Client) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		if len(line)+len(chunk) > maxReplySize {
			return nil, errReplyTooLarge
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}
