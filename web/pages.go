package web

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/trace"
)

// The pages: the caller's VMs, stands and benches, and one VM. A page is
// rendered whole; its script then keeps the live parts up to date from the
// JSON beside it.

// vmRow is a VM in the list.
type vmRow struct {
	Bench  string `json:"bench"`
	VMID   int    `json:"vmid"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Note   string `json:"note,omitempty"`
}

// benchProblem is a bench that could not be listed, and why.
type benchProblem struct {
	Bench string `json:"bench"`
	Error string `json:"error"`
}

// hypervisors answers the benches that hold VMs (not physical machines).
func (s *Server) hypervisors() []string {
	var out []string
	for _, b := range s.app.Config.Benches {
		if !b.Physical() {
			out = append(out, b.Name)
		}
	}
	return out
}

// myVMs lists the caller's VMs on every hypervisor bench.
func (s *Server) myVMs(ctx context.Context, sess *session) ([]vmRow, []benchProblem) {
	rows := []vmRow{}
	var problems []benchProblem
	for _, bench := range s.hypervisors() {
		who, err := s.app.Caller(ctx, sess.who.Creds, bench)
		if err == nil {
			var vms []backends.VM
			if vms, err = who.MyVMs(ctx); err == nil {
				for _, vm := range vms {
					rows = append(rows, vmRow{Bench: bench, VMID: vm.VMID, Name: vm.Name, Status: vm.Status, Note: vm.StatusNote})
				}
			}
		}
		if err != nil {
			problems = append(problems, benchProblem{Bench: bench, Error: err.Error()})
		}
	}
	return rows, problems
}

func (s *Server) vmsPage(w http.ResponseWriter, r *http.Request, sess *session) {
	rows, problems := s.myVMs(r.Context(), sess)
	s.render(w, r, http.StatusOK, "vms.html", sess, map[string]any{"Title": "Your VMs", "VMs": rows, "Problems": problems})
}

func (s *Server) vmsJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	rows, problems := s.myVMs(r.Context(), sess)
	writeJSON(w, http.StatusOK, map[string]any{"vms": rows, "problems": problems})
}

// standRow is a stand in the list.
type standRow struct {
	Bench string
	stand.Summary
}

func (s *Server) standsPage(w http.ResponseWriter, r *http.Request, sess *session) {
	var rows []standRow
	var problems []benchProblem
	for _, bench := range s.hypervisors() {
		list, err := s.standList(r.Context(), sess, bench)
		if err != nil {
			problems = append(problems, benchProblem{Bench: bench, Error: err.Error()})
		}
		for _, sum := range list {
			rows = append(rows, standRow{Bench: bench, Summary: sum})
		}
	}
	s.render(w, r, http.StatusOK, "stands.html", sess, map[string]any{"Title": "Your stands", "Stands": rows, "Problems": problems})
}

func (s *Server) standList(ctx context.Context, sess *session, bench string) ([]stand.Summary, error) {
	who, err := s.app.Caller(ctx, sess.who.Creds, bench)
	if err != nil {
		return nil, err
	}
	got, err := s.app.Stands.Status(ctx, who, bench, "")
	if err != nil {
		return nil, err
	}
	list, _ := got.(map[string]any)["stands"].([]stand.Summary)
	return list, nil
}

// standView answers the caller's stand, false when it is not theirs or
// not there (the same answer for both).
func (s *Server) standView(r *http.Request, sess *session) (stand.View, bool) {
	bench, name := r.PathValue("bench"), r.PathValue("name")
	if !s.isHypervisor(bench) {
		return stand.View{}, false
	}
	who, err := s.app.Caller(r.Context(), sess.who.Creds, bench)
	if err != nil {
		return stand.View{}, false
	}
	got, err := s.app.Stands.Status(r.Context(), who, bench, name)
	if err != nil {
		return stand.View{}, false
	}
	v, ok := got.(stand.View)
	return v, ok
}

func (s *Server) standPage(w http.ResponseWriter, r *http.Request, sess *session) {
	v, ok := s.standView(r, sess)
	if !ok {
		s.notFound(w, r)
		return
	}
	s.render(w, r, http.StatusOK, "stand.html", sess, map[string]any{"Title": "Stand " + v.Stand, "Bench": r.PathValue("bench"), "Stand": v})
}

func (s *Server) standJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	v, ok := s.standView(r, sess)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "not found"})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) isHypervisor(bench string) bool {
	for _, b := range s.hypervisors() {
		if b == bench {
			return true
		}
	}
	return false
}

// benchRow is a bench as the benches page shows it.
type benchRow struct {
	Name     string
	Type     string
	Physical bool
	Facts    map[string]string
	Lease    string // who holds it until when, or "free"
	Power    string // the machine's power state, when the caller may read it
	Usable   bool   // the caller may open its machine's page
	Problem  string
}

func (s *Server) benchesPage(w http.ResponseWriter, r *http.Request, sess *session) {
	facts := s.app.BenchFacts()
	var rows []benchRow
	for _, b := range s.app.Config.Benches {
		row := benchRow{Name: b.Name, Type: b.Type, Physical: b.Physical(), Facts: facts[b.Name]}
		if row.Physical {
			s.machineRow(r.Context(), sess, &row)
		}
		rows = append(rows, row)
	}
	s.render(w, r, http.StatusOK, "benches.html", sess, map[string]any{"Title": "Benches", "Benches": rows})
}

// machineRow fills in a physical bench's lease and power state, as far as
// the caller may see them (hostapi decides: a rental's machine is its
// lease holder's).
func (s *Server) machineRow(ctx context.Context, sess *session, row *benchRow) {
	who, err := s.app.Caller(ctx, sess.who.Creds, row.Name)
	if err != nil {
		row.Problem = err.Error()
		return
	}
	row.Lease = "free"
	if l, err := who.BenchLease(ctx); err != nil {
		row.Lease = err.Error()
	} else if l != nil {
		row.Lease = l.Holder + " until " + l.Until.UTC().Format(time.RFC3339)
	}
	vm, release, err := who.WithBusyWait(0).LockVM(ctx, hostapi.MachineVMID)
	if err != nil {
		row.Power = err.Error()
		return
	}
	defer release()
	row.Usable = true
	if row.Power, err = vm.PowerState(ctx); err != nil {
		row.Power = err.Error()
	}
}

// watchVM answers the caller's VM a URL names, nil (having answered 404)
// when it is not theirs or not there: both look the same.
func (s *Server) watchVM(w http.ResponseWriter, r *http.Request, sess *session) (*hostapi.Watched, *hostapi.Caller, string) {
	bench := r.PathValue("bench")
	vmid, err := strconv.Atoi(r.PathValue("vmid"))
	if err != nil || vmid <= 0 {
		s.notFound(w, r)
		return nil, nil, ""
	}
	who, err := s.app.Caller(r.Context(), sess.who.Creds, bench)
	if err != nil {
		s.notFound(w, r)
		return nil, nil, ""
	}
	watched, err := who.Watch(r.Context(), vmid)
	if err != nil {
		s.notFound(w, r)
		return nil, nil, ""
	}
	return watched, who, bench
}

// stepRow is a trace step as the VM page shows it.
type stepRow struct {
	ID      int64           `json:"id"`
	At      string          `json:"at"`
	Took    string          `json:"took"`
	Source  string          `json:"source"`
	Caller  string          `json:"caller"`
	Call    string          `json:"call"`
	Args    json.RawMessage `json:"args"`
	Outcome string          `json:"outcome"`
	Error   string          `json:"error,omitempty"`
	Before  string          `json:"before,omitempty"`
	After   string          `json:"after,omitempty"`
	Text    string          `json:"text,omitempty"`
}

// traceSoFar answers the VM's steps the caller may read after id after.
func (s *Server) traceSoFar(ctx context.Context, who *hostapi.Caller, bench string, vmid int, after int64) ([]stepRow, string) {
	steps, err := s.app.TraceSteps(ctx, who, bench, trace.Query{VMID: vmid, After: after, Limit: 500})
	if err != nil {
		return nil, err.Error()
	}
	rows := make([]stepRow, 0, len(steps))
	for _, st := range steps {
		rows = append(rows, stepRow{ID: st.ID, At: st.At.UTC().Format("15:04:05.000"), Took: strconv.FormatFloat(st.Took.Seconds(), 'f', 2, 64) + " s",
			Source: st.Source, Caller: st.Caller, Call: st.Call, Args: st.Args, Outcome: st.Outcome, Error: st.Error,
			Before: st.Before, After: st.After, Text: st.Text})
	}
	return rows, ""
}

func (s *Server) vmPage(w http.ResponseWriter, r *http.Request, sess *session) {
	watched, who, bench := s.watchVM(w, r, sess)
	if watched == nil {
		return
	}
	vm := watched.VM()
	steps, traceProblem := s.traceSoFar(r.Context(), who, bench, vm.VMID, 0)
	_, physical := who.Machine()
	s.render(w, r, http.StatusOK, "vm.html", sess, map[string]any{"Title": vm.Name, "Bench": bench, "VM": vm, "Owner": watched.Owner(),
		"Physical": physical, "Steps": steps, "TraceProblem": traceProblem})
}

func (s *Server) traceJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	watched, who, bench := s.watchVM(w, r, sess)
	if watched == nil {
		return
	}
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	steps, problem := s.traceSoFar(r.Context(), who, bench, watched.VM().VMID, after)
	writeJSON(w, http.StatusOK, map[string]any{"steps": steps, "problem": problem})
}

// frame answers a trace frame's PNG, when a step the caller may read of
// this VM shows it.
func (s *Server) frame(w http.ResponseWriter, r *http.Request, sess *session) {
	watched, who, bench := s.watchVM(w, r, sess)
	if watched == nil {
		return
	}
	png, err := s.app.TraceFrame(r.Context(), who, bench, r.PathValue("digest"))
	if err != nil {
		s.notFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "private, max-age=86400, immutable") // a digest names its pixels
	w.Write(png)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
