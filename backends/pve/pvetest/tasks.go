package pvetest

import (
	"fmt"
	"strings"
	"time"
)

type task struct {
	upid, node, typ, id, user string
	pid                       int
	start                     time.Time
	done                      bool
	exit                      string
	timer                     *time.Timer
	end                       func() // a held task's ending, run by ReleaseTasks
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
	s.taskPID++
	now := time.Now()
	t := &task{node: node, typ: typ, id: id, user: c.tok.id, pid: s.taskPID, start: now}
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
	end := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		t.done = true
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
	if s.held[typ] {
		t.end = end
	} else {
		t.timer = time.AfterFunc(d, end)
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
