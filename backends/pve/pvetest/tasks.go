package pvetest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

type task struct {
	upid, node, typ, id, user string
	vmid                      int // the VM it acts on or makes (a clone's id names its source)
	pid                       int
	start, ended              time.Time
	done                      bool
	exit                      string
	timer                     *time.Timer
	end                       func() // a held task's ending, run by ReleaseTasks
}

// Task is a task as the server ran it, for assertions on order: which
// tasks ran at the same time, which began after another ended.
type Task struct {
	UPID, Type string
	ID         string // the UPID's id: a clone's names its source
	VMID       int    // the VM it acts on; a clone's is the new VM
	Started    time.Time
	Ended      time.Time // zero while it runs
	Exit       string    // "" while it runs
}

// Tasks answers the tasks of type typ (every type when empty), in the
// order they started.
func (s *Server) Tasks(typ string) []Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Task
	for _, t := range s.tasks {
		if typ == "" || t.typ == typ {
			out = append(out, Task{UPID: t.upid, Type: t.typ, ID: t.id, VMID: t.vmid, Started: t.start, Ended: t.ended, Exit: t.exit})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

type taskFault struct {
	exit     string // a failure text, or "" for warnings
	warnings int
}

// FailNextTask makes the next task of type typ ("qmclone", "qmstart",
// "qmstop", "qmshutdown", "qmsnapshot", "qmrollback", "qmdestroy",
// "qmcreate", "resize", "qmconfig") fail with exitstatus; its effect is not
// applied (a failed clone or create removes the VM it locked).
func (s *Server) FailNextTask(typ, exitstatus string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taskFaults[typ] = append(s.taskFaults[typ], taskFault{exit: exitstatus})
}

// WarnNextTask makes the next task of type typ succeed with "WARNINGS: n".
func (s *Server) WarnNextTask(typ string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taskFaults[typ] = append(s.taskFaults[typ], taskFault{warnings: n})
}

// SetTaskDuration sets how long tasks of type typ run ("" for every type
// without its own duration).
func (s *Server) SetTaskDuration(typ string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if typ == "" {
		s.opts.TaskDuration = d
		return
	}
	s.taskDur[typ] = d
}

// HoldTasks keeps every task of type typ started from now on running
// until ReleaseTasks: a test then sees "still running" because the task
// is, not because it happened to outlast a wait.
func (s *Server) HoldTasks(typ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[typ] = true
}

// GateTasks holds the next n tasks of type typ until all n have started,
// then lets each run its course from that moment. A test that needs n
// tasks to run at once (machines built in parallel) sees it because they
// did: a caller that waits for one task before starting the next never
// opens the gate, and its first task never ends.
func (s *Server) GateTasks(typ string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gates[typ] = &gate{n: n}
}

// gate is GateTasks' hold: the arming of each task started so far.
type gate struct {
	n       int
	waiting []func()
}

// ReleaseTasks ends the held tasks of type typ (as their duration would
// have) and stops holding new ones.
func (s *Server) ReleaseTasks(typ string) {
	s.mu.Lock()
	delete(s.held, typ)
	var ends []func()
	for _, t := range s.tasks {
		if t.typ == typ && t.end != nil {
			ends, t.end = append(ends, t.end), nil
		}
	}
	s.mu.Unlock()
	for _, end := range ends {
		end()
	}
}

// startTask starts a worker task and answers its UPID. ok is the task's
// effect, applied when it ends (an error fails the task); failed undoes
// what the API call did up front when the task fails. s.mu is held.
func (s *Server) startTask(c *call, node, typ, id string, ok func() error, failed func()) string {
	vmid, _ := strconv.Atoi(id)
	return s.startTaskFor(c, node, typ, id, vmid, 0, ok, failed)
}

// startTaskFor is startTask for a task about vmid that runs work longer
// than its type's duration (a full clone's copy).
func (s *Server) startTaskFor(c *call, node, typ, id string, vmid int, work time.Duration, ok func() error, failed func()) string {
	s.taskPID++
	now := time.Now()
	t := &task{node: node, typ: typ, id: id, vmid: vmid, user: c.tok.id, pid: s.taskPID, start: now}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, t.pid, 0x2000+t.pid, now.Unix(), typ, id, t.user)
	s.tasks[t.upid] = t
	var fault *taskFault
	if q := s.taskFaults[typ]; len(q) > 0 {
		fault, s.taskFaults[typ] = &q[0], q[1:]
	}
	d, has := s.taskDur[typ]
	if !has {
		d = s.opts.TaskDuration
	}
	d += work
	end := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		t.done, t.ended = true, time.Now()
		switch {
		case fault != nil && fault.exit != "":
			t.exit = fault.exit
		default:
			if ok != nil {
				if err := ok(); err != nil {
					t.exit = strings.TrimSpace(err.Error())
					if ae, isAPI := err.(*apiError); isAPI {
						t.exit = ae.msg
					}
				}
			}
			if t.exit == "" {
				t.exit = "OK"
				if fault != nil {
					t.exit = fmt.Sprintf("WARNINGS: %d", fault.warnings)
				}
			}
		}
		if t.exit != "OK" && !strings.HasPrefix(t.exit, "WARNINGS") && failed != nil {
			failed()
		}
		s.logf("task %s ended: %s", t.upid, t.exit)
	}
	arm := func() {
		if s.held[typ] {
			t.end = end
		} else {
			t.timer = time.AfterFunc(d, end)
		}
	}
	g := s.gates[typ]
	if g == nil {
		arm()
		return t.upid
	}
	g.waiting = append(g.waiting, arm)
	if len(g.waiting) >= g.n {
		delete(s.gates, typ)
		for _, a := range g.waiting {
			a()
		}
	}
	return t.upid
}

// taskStatus answers GET /nodes/{node}/tasks/{upid}/status.
func (s *Server) taskStatus(c *call) (any, error) {
	upid := c.vars["upid"]
	s.mu.Lock()
	defer s.mu.Unlock()
	if !strings.HasPrefix(upid, "UPID:") || strings.Count(upid, ":") < 8 {
		return nil, paramError("upid", "unable to parse worker upid '%s'", upid)
	}
	t, ok := s.tasks[upid]
	if !ok || t.node != c.vars["node"] {
		return nil, fail(500, "unable to open file '/var/log/pve/tasks/active' - no such task '%s'", upid)
	}
	if t.user != c.tok.id && !s.can(c.tok, "/nodes/"+t.node, "Sys.Audit") {
		return nil, fail(403, "Permission check failed (/nodes/%s, Sys.Audit)", t.node)
	}
	out := map[string]any{"upid": t.upid, "node": t.node, "pid": t.pid, "pstart": 0x2000 + t.pid,
		"starttime": t.start.Unix(), "type": t.typ, "id": t.id, "user": t.user, "status": "running"}
	if t.done {
		out["status"] = "stopped"
		out["exitstatus"] = t.exit
	}
	return out, nil
}

// TaskExit answers how a task ended ("" while it runs), for assertions.
func (s *Server) TaskExit(upid string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tasks[upid]; ok {
		return t.exit
	}
	return ""
}
