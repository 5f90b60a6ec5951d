// Package tasklist runs a backend's long operations in the background and
// reports on them by a PVE-style UPID, for backends that have no task
// system of their own (the local QEMU driver, PiKVM, BMCs).
package tasklist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// keep is how long a finished task stays queryable.
const keep = 24 * time.Hour

// List is a set of running and recently finished tasks. The zero value is
// not usable: make one with New.
type List struct {
	node string

	mu    sync.Mutex
	seq   uint64
	tasks map[string]*task
}

type task struct {
	status backends.TaskStatus
	ended  time.Time
	done   chan struct{}
}

// New makes a task list whose UPIDs name node.
func New(node string) *List {
	return &List{node: node, tasks: map[string]*task{}}
}

// Start runs fn in the background as a task of kind typ on vmid. fn gets a
// context that outlives the caller's request: a task is not cancelled when
// the call that started it ends.
func (l *List) Start(typ string, vmid int, fn func(ctx context.Context) error) backends.Task {
	l.mu.Lock()
	l.seq++
	id := fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%d:poligon@%s:",
		l.node, os.Getpid(), l.seq, time.Now().Unix(), typ, vmid, l.node)
	t := &task{status: backends.TaskStatus{Running: true, Type: typ, VMID: vmid}, done: make(chan struct{})}
	l.tasks[id] = t
	l.gcLocked()
	l.mu.Unlock()

	go func() {
		err := fn(context.Background())
		l.mu.Lock()
		t.status.Running = false
		t.status.ExitStatus = "OK"
		if err != nil {
			t.status.ExitStatus = err.Error()
		}
		t.ended = time.Now()
		l.mu.Unlock()
		close(t.done)
	}()
	return backends.Task{ID: id, VMID: vmid}
}

// Status answers what is known of task id.
func (l *List) Status(id string) (backends.TaskStatus, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.tasks[id]
	if !ok {
		return backends.TaskStatus{}, l.unknown(id)
	}
	return t.status, nil
}

// Wait blocks until task id ends or ctx does, then answers its status.
func (l *List) Wait(ctx context.Context, id string) (backends.TaskStatus, error) {
	l.mu.Lock()
	t, ok := l.tasks[id]
	l.mu.Unlock()
	if !ok {
		return backends.TaskStatus{}, l.unknown(id)
	}
	select {
	case <-t.done:
	case <-ctx.Done():
	}
	return l.Status(id)
}

func (l *List) unknown(id string) error {
	if node, ok := UPIDNode(id); ok && node != l.node {
		return fmt.Errorf("task %s: %w: it belongs to node %q, this is %q", id, backends.ErrNotFound, node, l.node)
	}
	return fmt.Errorf("task %s: %w (tasks of this backend live in the server's memory: a restart forgets them)", id, backends.ErrNotFound)
}

func (l *List) gcLocked() {
	for id, t := range l.tasks {
		if !t.status.Running && time.Since(t.ended) > keep {
			delete(l.tasks, id)
		}
	}
}

// UPIDNode answers the node field of a UPID.
func UPIDNode(upid string) (string, bool) {
	parts := strings.Split(upid, ":")
	if len(parts) < 9 || parts[0] != "UPID" || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// ParseUPID splits a UPID into its fields, checking its shape:
// UPID:node:pid:pstart:starttime:type:id:user: (the user may hold a !token).
func ParseUPID(upid string) (UPID, error) {
	parts := strings.SplitN(upid, ":", 8)
	if len(parts) != 8 || parts[0] != "UPID" {
		return UPID{}, errors.New("not a UPID: want UPID:node:pid:pstart:starttime:type:id:user:")
	}
	if !strings.HasSuffix(parts[7], ":") {
		return UPID{}, errors.New("not a UPID: it must end with ':'")
	}
	u := UPID{Node: parts[1], Type: parts[5], ID: parts[6], User: strings.TrimSuffix(parts[7], ":")}
	pid, err1 := strconv.ParseUint(parts[2], 16, 32)
	start, err2 := strconv.ParseUint(parts[4], 16, 64)
	if u.Node == "" || u.Type == "" || err1 != nil || err2 != nil {
		return UPID{}, errors.New("not a UPID: a field is empty or not hexadecimal")
	}
	u.PID = int(pid)
	u.Start = time.Unix(int64(start), 0)
	return u, nil
}

// UPID is a parsed task id.
type UPID struct {
	Node  string
	PID   int
	Start time.Time
	Type  string
	ID    string
	User  string
}
