package pve

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/tasklist"
)

// Polling of task status: quick at first (most tasks end within a second),
// then every 2 s.
const (
	pollFirst = 200 * time.Millisecond
	pollMax   = 2 * time.Second
	// internalWait bounds our own waits (a resize, a disk added, a stop
	// before destroy) when the caller's context has no deadline.
	internalWait = 5 * time.Minute
)

type taskStatusAnswer struct {
	Status     string `json:"status"`
	ExitStatus string `json:"exitstatus"`
	Type       string `json:"type"`
	ID         string `json:"id"`
}

// TaskStatus asks the node named in the UPID about a task. A task that
// ended with "WARNINGS: n" succeeded: its ExitStatus is "OK" (the warnings
// are logged), so TaskStatus.Failed is false for it.
func (b *Backend) TaskStatus(ctx context.Context, id string) (backends.TaskStatus, error) {
	u, err := tasklist.ParseUPID(id)
	if err != nil {
		return backends.TaskStatus{}, fmt.Errorf("pve: task %q: %w (%w)", id, err, backends.ErrNotFound)
	}
	memo, known := b.tok.memoFor(id)
	if known && memo.noop != nil {
		return *memo.noop, nil
	}
	var ans taskStatusAnswer
	path := fmt.Sprintf("/nodes/%s/tasks/%s/status", url.PathEscape(u.Node), url.PathEscape(id))
	if err := b.get(ctx, "read task status", path, nil, &ans); err != nil {
		return backends.TaskStatus{}, err
	}
	st := backends.TaskStatus{Running: ans.Status == "running", Type: u.Type}
	if vmid, err := strconv.Atoi(u.ID); err == nil {
		st.VMID = vmid
	}
	if known && memo.vmid != 0 {
		st.VMID = memo.vmid // a clone's UPID names the template, not the clone
	}
	if !st.Running {
		st.ExitStatus = ans.ExitStatus
		if strings.HasPrefix(ans.ExitStatus, "WARNINGS") {
			b.log.WarnContext(ctx, "pve: task ended with warnings (counted as success)", "upid", id, "exitstatus", ans.ExitStatus)
			st.ExitStatus = "OK"
		}
		if st.ExitStatus == "" {
			st.ExitStatus = "task ended without an exit status"
		}
		b.tok.taskSeen(id, st)
	}
	return st, nil
}

// WaitTask polls until the task ends or ctx does, and answers its latest
// status (still Running when ctx ended first). Failures to ask (a node
// briefly unreachable) are retried until ctx ends; the error is for an
// unknown task or a backend that never answered.
func (b *Backend) WaitTask(ctx context.Context, id string) (backends.TaskStatus, error) {
	var last backends.TaskStatus
	var lastErr error
	seen := false
	delay := pollFirst
	for {
		st, err := b.TaskStatus(ctx, id)
		switch {
		case err == nil:
			last, seen, lastErr = st, true, nil
			if !st.Running {
				return st, nil
			}
		case ctx.Err() != nil:
		case !retryable(err):
			return last, err
		default:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if !seen && lastErr != nil {
				return last, lastErr
			}
			if !seen {
				last.Running = true
			}
			return last, nil
		case <-time.After(delay):
		}
		delay = min(delay*2, pollMax)
	}
}

// retryable says whether asking again may help: the network, a proxy that
// could not reach a node, a server error; not a refusal.
func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 && !errors.Is(err, backends.ErrNotFound)
	}
	var ue *url.Error
	return errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded)
}

// finish waits for a task we started ourselves and turns its failure into
// an error, within ctx (or internalWait when ctx has no deadline).
func (b *Backend) finish(ctx context.Context, task backends.Task, what string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, internalWait)
		defer cancel()
	}
	st, err := b.WaitTask(ctx, task.ID)
	switch {
	case err != nil:
		return err
	case st.Running:
		return fmt.Errorf("pve: %s: the task is still running (upid %s); call again later", what, task.ID)
	case st.Failed():
		return fmt.Errorf("pve: %s failed: %s", what, st.ExitStatus)
	}
	return nil
}

// noopTask answers a task that had nothing to do (starting a running VM,
// stopping a stopped one) as a finished UPID only this process knows.
func (b *Backend) noopTask(node, typ string, vmid int) backends.Task {
	id := fmt.Sprintf("UPID:%s:00000000:00000000:%08X:%s:%d:%s:", node, time.Now().Unix(), typ, vmid, b.tokenID)
	b.tok.memo(id, taskMemo{vmid: vmid, noop: &backends.TaskStatus{ExitStatus: "OK", Type: typ, VMID: vmid}})
	return backends.Task{ID: id, VMID: vmid}
}
