package stand

import (
	"context"
	"path/filepath"
	"time"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/store"
)

// What stand_status answers (and `poligon stand status` prints): a stand's
// progress, or the list of an owner's stands.

// View is a stand as stand_status shows it.
type View struct {
	OK       bool              `json:"ok"`
	Stand    string            `json:"stand"`
	Status   store.StandStatus `json:"status"`
	Machines []MachineView     `json:"machines"`
	Error    *string           `json:"error"`
	Started  time.Time         `json:"started"`
	Ended    *time.Time        `json:"ended,omitempty"`
	Seconds  float64           `json:"seconds"`
}

// MachineView is one machine of a stand.
type MachineView struct {
	Role     string              `json:"role"`
	Template string              `json:"template"`
	VMID     int                 `json:"vmid,omitempty"`
	Node     string              `json:"node,omitempty"`
	IP       string              `json:"ip,omitempty"`
	Status   store.MachineStatus `json:"status"`
	Needs    []string            `json:"needs,omitempty"`
	Steps    []StepView          `json:"steps"`
	Done     bool                `json:"done"`
	Error    string              `json:"error,omitempty"`
	Started  *time.Time          `json:"started,omitempty"`
	Ended    *time.Time          `json:"ended,omitempty"`
	Seconds  float64             `json:"seconds,omitempty"` // its own build time, clone to snapshot
	// Phases are where that time went, in order (a resumed build adds its
	// own): cloning, booting, waiting (for the machines it needs), steps
	// (each step's time is in Steps), snapshot.
	Phases []PhaseView `json:"phases,omitempty"`
	// Transcript is the last run of its steps, relative to the state
	// directory.
	Transcript string `json:"transcript,omitempty"`
}

// PhaseView is one timed part of a machine's build.
type PhaseView struct {
	Name    store.MachineStatus `json:"name"`
	Started time.Time           `json:"started"`
	Ended   *time.Time          `json:"ended,omitempty"`
	Seconds float64             `json:"seconds,omitempty"` // to now while it runs; absent when its builder died in it
}

// StepView is one step of a machine.
type StepView struct {
	N       int        `json:"n"`
	Label   string     `json:"label"`
	Status  string     `json:"status"` // pending, running, done, failed, interrupted
	Started *time.Time `json:"started,omitempty"`
	Ended   *time.Time `json:"ended,omitempty"`
	Seconds float64    `json:"seconds,omitempty"` // to now while it runs
	Error   string     `json:"error,omitempty"`
}

// Summary is one line of the list.
type Summary struct {
	Stand    string            `json:"stand"`
	Status   store.StandStatus `json:"status"`
	Machines int               `json:"machines"`
	Done     int               `json:"done"`
	Error    string            `json:"error,omitempty"`
	Started  time.Time         `json:"started"`
}

// Status answers the caller's stand name as a View, or with name "" the
// list of their stands.
func (s *Service) Status(ctx context.Context, who *hostapi.Caller, bench, name string) (any, error) {
	if _, err := s.store(); err != nil {
		return nil, err
	}
	list, err := s.refresh(ctx, bench, who.Owner())
	if err != nil {
		return nil, err
	}
	if name == "" {
		out := []Summary{}
		for _, st := range list {
			sum := Summary{Stand: st.Name, Status: st.Status, Machines: len(st.Machines), Error: st.Error, Started: st.Created}
			for _, m := range st.Machines {
				if m.Status == store.MachineDone {
					sum.Done++
				}
			}
			out = append(out, sum)
		}
		return map[string]any{"ok": true, "stands": out}, nil
	}
	for _, st := range list {
		if st.Name == name {
			return view(st, s.o.StateDir), nil
		}
	}
	return nil, hostapi.Failf("stand_status without stand lists yours; a stand is forgotten a day after it stopped (its VMs stay: stand_destroy finds them by name)", "no stand %s", name)
}

func view(st store.Stand, stateDir string) View {
	v := View{OK: true, Stand: st.Name, Status: st.Status, Started: st.Created, Machines: []MachineView{}}
	now := time.Now().UTC()
	end := now
	if !st.Ended.IsZero() {
		v.Ended, end = &st.Ended, st.Ended
	}
	v.Seconds = end.Sub(st.Created).Seconds()
	running := st.Status == store.StandRunning
	// seconds is a part's time: to now while the stand builds, none when
	// it never ended (its builder died in it).
	seconds := func(from, to time.Time) float64 {
		switch {
		case !to.IsZero():
			return to.Sub(from).Seconds()
		case running && !from.IsZero():
			return now.Sub(from).Seconds()
		}
		return 0
	}
	if st.Error != "" {
		v.Error = &st.Error
	}
	for _, m := range st.Machines {
		mv := MachineView{Role: m.Role, Template: m.Template, VMID: m.VMID, Node: m.Node, IP: m.IP, Status: m.Status,
			Needs: m.Needs, Done: m.Status == store.MachineDone, Error: m.Error, Started: timePtr(m.Started), Ended: timePtr(m.Ended),
			Transcript: relPath(stateDir, m.Transcript), Steps: []StepView{}}
		if !m.Started.IsZero() && !m.Ended.IsZero() {
			mv.Seconds = m.Ended.Sub(m.Started).Seconds()
		}
		for _, p := range m.Phases {
			mv.Phases = append(mv.Phases, PhaseView{Name: p.Name, Started: p.Started, Ended: timePtr(p.Ended), Seconds: seconds(p.Started, p.Ended)})
		}
		for _, step := range m.Steps {
			sv := StepView{N: step.N, Label: step.Label, Started: timePtr(step.Started), Ended: timePtr(step.Ended), Error: step.Error, Status: "pending",
				Seconds: seconds(step.Started, step.Ended)}
			switch {
			case step.Error != "":
				sv.Status = "failed"
			case !step.Ended.IsZero():
				sv.Status = "done"
			case !step.Started.IsZero() && st.Status == store.StandRunning:
				sv.Status = "running"
			case !step.Started.IsZero():
				sv.Status = "interrupted" // cut by a restart or a destroy: resume runs it again
			}
			mv.Steps = append(mv.Steps, sv)
		}
		v.Machines = append(v.Machines, mv)
	}
	return v
}

// relPath is a path inside dir as relative to it, so an answer shows no
// host path; one outside it (never written so) by its name alone.
func relPath(dir, path string) string {
	if path == "" {
		return ""
	}
	if rel, err := filepath.Rel(dir, path); err == nil && dir != "" && filepath.IsLocal(rel) {
		return rel
	}
	return filepath.Base(path)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
