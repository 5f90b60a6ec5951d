package qga

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Per-call transfer sizes. qemu-ga refuses a guest-file-read count above
// 48 MiB, and its JSON parser refuses a token above 64 MiB, which caps one
// guest-file-write at 48 MiB of data (64 MiB of base64). 1 MiB chunks keep
// every reply small while costing little per call.
const (
	readChunk  = 1 << 20
	writeChunk = 1 << 20
)

// FileOpen opens a file in the guest; mode is an fopen mode ("r", "w", "a+",
// ...; the agent's default "r" when empty). It answers the agent's handle.
func (c *Client) FileOpen(ctx context.Context, path, mode string) (int64, error) {
	args := map[string]string{"path": path}
	if mode != "" {
		args["mode"] = mode
	}
	var handle int64
	err := c.Execute(ctx, "guest-file-open", args, &handle)
	return handle, err
}

// FileRead reads at most count bytes from the handle's position and reports
// whether the end of the file was reached.
func (c *Client) FileRead(ctx context.Context, handle int64, count int) ([]byte, bool, error) {
	var result struct {
		Count int    `json:"count"`
		Data  []byte `json:"buf-b64"`
		EOF   bool   `json:"eof"`
	}
	err := c.Execute(ctx, "guest-file-read", map[string]int64{"handle": handle, "count": int64(count)}, &result)
	return result.Data, result.EOF, err
}

// FileWrite writes data at the handle's position and answers the count the
// agent wrote.
func (c *Client) FileWrite(ctx context.Context, handle int64, data []byte) (int, error) {
	args := struct {
		Handle int64  `json:"handle"`
		Data   []byte `json:"buf-b64"`
	}{handle, data}
	var result struct {
		Count int `json:"count"`
	}
	err := c.Execute(ctx, "guest-file-write", args, &result)
	return result.Count, err
}

// FileSeek moves the handle's position; whence is io.SeekStart, io.SeekCurrent
// or io.SeekEnd (the agent uses the same numbers). It answers the new position.
func (c *Client) FileSeek(ctx context.Context, handle, offset int64, whence int) (int64, error) {
	var result struct {
		Position int64 `json:"position"`
	}
	err := c.Execute(ctx, "guest-file-seek", map[string]int64{"handle": handle, "offset": offset, "whence": int64(whence)}, &result)
	return result.Position, err
}

// FileClose closes a handle.
func (c *Client) FileClose(ctx context.Context, handle int64) error {
	return c.Execute(ctx, "guest-file-close", map[string]int64{"handle": handle}, nil)
}

// closeHandle closes a handle after a transfer. When ctx has already ended the
// close cannot be sent now: it is queued and sent before the next command, so
// the agent does not keep the handle open for ever.
func (c *Client) closeHandle(ctx context.Context, handle int64) error {
	err := c.FileClose(ctx, handle)
	var agentErr *Error
	if err != nil && !errors.As(err, &agentErr) && !errors.Is(err, ErrClosed) {
		c.pendingMu.Lock()
		c.pendingCloses = append(c.pendingCloses, handle)
		c.pendingMu.Unlock()
	}
	return err
}

// ReadFile reads at most limit bytes of path from offset, and the size of the
// whole file. The size comes from seeking to the end; for files whose size the
// kernel does not know (/proc, pipes) it is what the read saw: exact when the
// read reached the end, a lower bound otherwise. limit 0 answers only the size.
func (c *Client) ReadFile(ctx context.Context, path string, offset, limit int64) (data []byte, size int64, err error) {
	if offset < 0 || limit < 0 {
		return nil, 0, fmt.Errorf("qga: read %s: negative offset %d or limit %d", path, offset, limit)
	}
	handle, err := c.FileOpen(ctx, path, "r")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if cerr := c.closeHandle(ctx, handle); cerr != nil && err == nil {
			err = cerr
		}
	}()
	size, err = c.FileSeek(ctx, handle, 0, io.SeekEnd)
	if err != nil {
		return nil, 0, err
	}
	if limit == 0 {
		return nil, size, nil
	}
	if _, err := c.FileSeek(ctx, handle, offset, io.SeekStart); err != nil {
		return nil, 0, err
	}
	eof := false
	for int64(len(data)) < limit && !eof {
		var chunk []byte
		chunk, eof, err = c.FileRead(ctx, handle, int(min(limit-int64(len(data)), readChunk)))
		if err != nil {
			return nil, 0, err
		}
		data = append(data, chunk...)
		if len(chunk) == 0 {
			eof = true // a short file with no eof flag yet: nothing more comes
		}
	}
	if len(data) > 0 {
		size = max(size, offset+int64(len(data))) // seeking tells nothing in /proc
	}
	return data, size, nil
}

// WriteFile creates or truncates path and writes data to it, in chunks the
// agent accepts. The handle is closed on every path.
func (c *Client) WriteFile(ctx context.Context, path string, data []byte) (err error) {
	handle, err := c.FileOpen(ctx, path, "w")
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.closeHandle(ctx, handle); cerr != nil && err == nil {
			err = fmt.Errorf("qga: write %s: closing: %w", path, cerr)
		}
	}()
	for written := 0; written < len(data); {
		n, err := c.FileWrite(ctx, handle, data[written:min(len(data), written+writeChunk)])
		if err != nil {
			return fmt.Errorf("qga: write %s at %d: %w", path, written, err)
		}
		if n <= 0 {
			return fmt.Errorf("qga: write %s at %d: the agent wrote nothing", path, written)
		}
		written += n
	}
	return nil
}
