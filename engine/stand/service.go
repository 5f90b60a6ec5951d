package stand

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/engine/catalog"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/store"
	"github.com/poligon/poligon/internal/trace"
	"github.com/poligon/poligon/runtime"
)

// The stand service: a plan is checked (Check), compiled (Compile), and
// built here in the background, one goroutine per machine, its progress
// written to the store after every change so that another process (a
// restarted server, `poligon stand status`) sees it. A machine's steps are
// one run of the compiled module (role=..., from=...), through the same
// catalog, locks and transcripts as any script. Every door (the MCP tools,
// `poligon stand`) calls the same Service.

// Store is where stands are kept: internal/store's, shared by every poligon
// process on the machine.
type Store interface {
	CreateStand(ctx context.Context, st store.Stand, maxBuilding int, now time.Time) error
	UpdateStand(ctx context.Context, bench, owner, name string, now time.Time, fn func(*store.Stand) error) (store.Stand, error)
	StandOf(ctx context.Context, bench, owner, name string) (store.Stand, bool, error)
	Stands(ctx context.Context, bench, owner string) ([]store.Stand, error)
	DeleteStand(ctx context.Context, bench, owner, name string) error
	ForgetStands(ctx context.Context, cutoff time.Time) (int, error)
	// Hold and Present tell other processes whether a builder is alive.
	Hold(id string) (release func(), err error)
	Present(id string) bool
}

// Scripts compile and run a stand's module against the loaded scripts and
// recipes (engine/catalog's Catalog).
type Scripts interface {
	Compile(ctx context.Context, file string, data []byte) (*catalog.Script, error)
	Run(ctx context.Context, v *hostapi.VM, sc *catalog.Script, params map[string]string, hooks catalog.RunHooks) (catalog.RunOutcome, error)
	Manifests() map[string]runtime.Manifest
}

// Callers open a caller on a bench (the app's).
type Callers interface {
	Caller(ctx context.Context, who hostapi.Credentials, bench string) (*hostapi.Caller, error)
}

// ServiceOptions are a Service's dependencies and limits.
type ServiceOptions struct {
	Store   Store // nil: no state_dir, so no stands (every call says how to get them)
	Scripts Scripts
	Callers Callers
	Planner *Planner // nil: stand_plan says how to configure one
	Notes   string   // the planner notes file ("" for the shipped notes)
	Log     *slog.Logger
	// StateDir is where transcripts live; answers show paths relative to it.
	StateDir    string
	MaxMachines int // per stand
	MaxBuilding int // stands building at once per owner
	// Trace records each machine's phases as steps (its steps' host calls
	// are the catalog's to record); nil: none.
	Trace *trace.Recorder
}

// Service plans, builds, follows and destroys stands.
type Service struct {
	o ServiceOptions
	// id names this builder in the stands it builds; the store holds it
	// present while the service is open.
	id      string
	release func()

	mu      sync.Mutex
	running map[key]*build
	closed  bool
}

// key names a stand across benches and owners.
type key struct{ bench, owner, name string }

func (k key) String() string { return k.bench + "/" + k.owner + "/" + k.name }

// build is one stand being built by this service.
type build struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// forget is how long a stopped stand is remembered.
const forget = 24 * time.Hour

// The bounds of a machine's build outside its steps.
const (
	agentWait = 180 * time.Second // the guest agent after start (the manual's)
	ipWait    = 60 * time.Second  // a global IPv4 after the agent answers
	taskWait  = 600 * time.Second // clone, start, snapshot tasks
)

// Why a build stopped early.
var (
	errInterrupted = errors.New("the server stopped while the stand was building")
	errDestroyed   = errors.New("destroyed while building")
)

// NewService makes the stand service; with a store, this process is
// present as a builder until Close.
func NewService(o ServiceOptions) (*Service, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	var b [6]byte
	rand.Read(b[:])
	s := &Service{o: o, id: builderPrefix(os.Getpid()) + hex.EncodeToString(b[:]), release: func() {}, running: map[key]*build{}}
	if o.Store != nil {
		release, err := o.Store.Hold(s.id)
		if err != nil {
			return nil, err
		}
		s.release = release
	}
	return s, nil
}

// Close interrupts every build of this service, waits (up to 30 s) for each
// to record it, and lets other processes see this builder gone.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	builds := make([]*build, 0, len(s.running))
	for _, b := range s.running {
		b.cancel(errInterrupted)
		builds = append(builds, b)
	}
	s.mu.Unlock()
	deadline := time.NewTimer(30 * time.Second) // one wait for them all
	defer deadline.Stop()
wait:
	for _, b := range builds {
		select {
		case <-b.done:
		case <-deadline.C:
			break wait
		}
	}
	s.release()
}

// store answers the store, or how to get one.
func (s *Service) store() (Store, error) {
	if s.o.Store == nil {
		return nil, hostapi.Failf("set state_dir in the config (or POLIGON_STATE): stands are kept in its store", "stands need a state directory")
	}
	return s.o.Store, nil
}

// env reads what a plan is validated against, for this caller.
func (s *Service) env(ctx context.Context, who *hostapi.Caller, bench string, resume bool) (Env, map[string]int, error) {
	tpls, err := who.Templates(ctx)
	if err != nil {
		return Env{}, nil, err
	}
	ids := map[string]int{}
	env := Env{Owner: who.Owner(), Resume: resume, MaxMachines: s.o.MaxMachines, MaxBuilding: s.o.MaxBuilding,
		Scripts: s.o.Scripts.Manifests()}
	for _, t := range tpls {
		env.Templates = append(env.Templates, t.Name)
		ids[t.Name] = t.VMID
	}
	vms, err := who.MyVMs(ctx)
	if err != nil {
		return Env{}, nil, err
	}
	for _, v := range vms {
		env.Existing = append(env.Existing, v.Name)
	}
	if s.o.Store != nil {
		list, err := s.refresh(ctx, bench, who.Owner())
		if err != nil {
			return Env{}, nil, err
		}
		for _, st := range list {
			if st.Status == store.StandRunning {
				env.Building++
			}
		}
	}
	return env, ids, nil
}

// refresh lists an owner's stands: those whose builder went away marked
// interrupted, those stopped a day ago left out (a new apply deletes them).
// A read writes only when a builder has died.
func (s *Service) refresh(ctx context.Context, bench, owner string) ([]store.Stand, error) {
	now := time.Now().UTC()
	all, err := s.o.Store.Stands(ctx, bench, owner)
	if err != nil {
		return nil, err
	}
	list := all[:0]
	for _, st := range all {
		if st.Status != store.StandRunning && st.Updated.Before(now.Add(-forget)) {
			continue
		}
		list = append(list, st)
	}
	for i, st := range list {
		if st.Status != store.StandRunning || s.o.Store.Present(st.Builder) {
			continue
		}
		builder := st.Builder
		up, err := s.o.Store.UpdateStand(ctx, bench, owner, st.Name, now, func(st *store.Stand) error {
			if st.Status == store.StandRunning && st.Builder == builder {
				markInterrupted(st)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		list[i] = up
	}
	return list, nil
}

func markInterrupted(st *store.Stand) {
	st.Status, st.Builder = store.StandInterrupted, ""
	st.Error = "the build was interrupted (the server stopped): stand_apply with resume=true continues it"
	for i := range st.Machines {
		if m := &st.Machines[i]; m.Status != store.MachineDone && m.Status != store.MachineFailed {
			m.Status = store.MachineInterrupted
		}
	}
}

// sameMachines refuses a resume whose plan changed the machines, their
// templates or their steps: the record's progress counts those.
func sameMachines(had []store.StandMachine, r Resolved) error {
	changed := len(had) != len(r.Machines)
	for i := 0; !changed && i < len(had); i++ {
		m := r.Machines[i]
		changed = had[i].Role != m.Role || had[i].Template != r.Templates[i] || len(had[i].Steps) != len(m.Steps)
		for n := 0; !changed && n < len(m.Steps); n++ {
			changed = had[i].Steps[n].Label != m.Steps[n].Label()
		}
	}
	if changed {
		return hostapi.Failf("resume without a plan continues the stand's own; to build a changed plan, stand_destroy it and apply again",
			"the plan changed the stand's machines or their steps since it was built")
	}
	return nil
}

// Apply is one stand_apply.
type Apply struct {
	Plan   json.RawMessage // the plan; with Resume, optional
	Stand  string          // with Resume: the stand to continue
	Pool   string
	Resume bool
	Bench  string
}

// Apply checks a plan, records the stand and starts its build in the
// background; it answers the stand's name at once. creds are the caller's:
// the build opens its own caller with them (the call's carries the call's
// progress and wait caps, and ends with it).
func (s *Service) Apply(ctx context.Context, who *hostapi.Caller, creds hostapi.Credentials, a Apply) (string, error) {
	st, err := s.store()
	if err != nil {
		return "", err
	}
	req := logs.Req(ctx) // this apply's: the build's lines keep it
	owner := who.Owner()
	planJSON := a.Plan
	if a.Resume {
		if a.Stand == "" {
			return "", hostapi.Failf("pass stand=<name> with resume=true", "resume needs the stand's name")
		}
		if _, err := s.refresh(ctx, a.Bench, owner); err != nil {
			return "", err
		}
		stored, ok, err := st.StandOf(ctx, a.Bench, owner, a.Stand)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", hostapi.Failf("stand_status lists your stands", "no stand %s to resume", a.Stand)
		}
		switch stored.Status {
		case store.StandRunning:
			return "", hostapi.Failf("stand_status shows its progress", "stand %s is still building", a.Stand)
		case store.StandDone:
			return "", hostapi.Failf("stand_destroy it first to build it again", "stand %s is done: nothing to resume", a.Stand)
		}
		if len(planJSON) == 0 {
			planJSON = stored.Plan
		}
	}
	if len(planJSON) == 0 {
		return "", hostapi.Failf("stand_plan writes one from a goal; the manual's Stands section shows the format", "plan is required")
	}
	planJSON = unquotePlan(planJSON)
	if _, err := st.ForgetStands(ctx, time.Now().UTC().Add(-forget)); err != nil {
		return "", err
	}
	env, tplIDs, err := s.env(ctx, who, a.Bench, a.Resume)
	if err != nil {
		return "", err
	}
	if p, derr := Decode(planJSON); derr == nil && !a.Resume {
		// A stand the store knows as unfinished is continued, not rebuilt.
		if old, ok, err := st.StandOf(ctx, a.Bench, owner, p.Name); err == nil && ok && (old.Status == store.StandRunning || old.Status == store.StandInterrupted) {
			return "", storeError(&store.StandExistsError{Name: p.Name, Status: old.Status})
		}
	}
	resolved, problems := Check(planJSON, env)
	if len(problems) > 0 {
		return "", planProblems(problems)
	}
	if a.Resume && resolved.Name != a.Stand {
		return "", hostapi.Failf("resume takes the stand's own plan (or none)", "the plan is for stand %s, not %s", resolved.Name, a.Stand)
	}
	script := Compile(resolved)
	sc, err := s.o.Scripts.Compile(ctx, "stand:"+resolved.Name+".js", script)
	if err != nil {
		return "", fmt.Errorf("the compiled script of stand %s does not load: %w", resolved.Name, err)
	}
	plan, _ := json.Marshal(resolved.Plan)
	k := key{a.Bench, owner, resolved.Name}
	now := time.Now().UTC()
	// The build's caller, before the stand is recorded running: a stand
	// must not be left running with no build behind it.
	bwho, err := s.o.Callers.Caller(context.WithoutCancel(ctx), creds, a.Bench)
	if err != nil {
		return "", err
	}
	bwho.ForScript()
	if a.Resume && env.Building >= env.MaxBuilding {
		// Validation lets a resume past the limit (its own build is not one);
		// the limit still holds for the builds it would add to.
		return "", hostapi.Failf("wait for one to finish (stand_status), or stand_destroy one", "%d stands are building already, at most %d at a time", env.Building, env.MaxBuilding)
	}
	if a.Resume {
		_, err = st.UpdateStand(ctx, k.bench, k.owner, k.name, now, func(rec *store.Stand) error {
			if rec.Status == store.StandRunning {
				return hostapi.Failf("stand_status shows its progress", "stand %s is still building", k.name)
			}
			if err := sameMachines(rec.Machines, resolved); err != nil {
				return err
			}
			rec.Status, rec.Builder, rec.Error, rec.Cancel, rec.Ended = store.StandRunning, s.id, "", false, time.Time{}
			rec.Plan, rec.Script, rec.Req = plan, string(script), req
			for i := range rec.Machines {
				if m := &rec.Machines[i]; m.Status != store.MachineDone {
					m.Status, m.Error = store.MachinePending, ""
				}
			}
			return nil
		})
	} else {
		rec := store.Stand{Bench: k.bench, Owner: owner, Name: k.name, Plan: plan, Script: string(script), Builder: s.id, Req: req}
		for i, m := range resolved.Machines {
			sm := store.StandMachine{Role: m.Role, Template: resolved.Templates[i], Needs: resolved.Needs[i], Status: store.MachinePending}
			for n, step := range m.Steps {
				sm.Steps = append(sm.Steps, store.StandStep{N: n + 1, Label: step.Label()})
			}
			rec.Machines = append(rec.Machines, sm)
		}
		err = st.CreateStand(ctx, rec, env.MaxBuilding, now)
	}
	if err != nil {
		return "", storeError(err)
	}
	bctx, cancel := context.WithCancelCause(logs.WithReq(context.WithoutCancel(ctx), req))
	bctx = trace.WithScope(bctx, trace.Scope{Bench: k.bench, Caller: owner, Stand: k.name, Source: trace.SourceStand})
	b := &build{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel(errInterrupted)
		close(b.done)
		return "", hostapi.Failf("the server is stopping: apply again once it is back (resume=true)", "stand %s was not started", k.name)
	}
	s.running[k] = b
	s.mu.Unlock()
	go func() {
		defer close(b.done)
		defer func() {
			s.mu.Lock()
			delete(s.running, k)
			s.mu.Unlock()
		}()
		s.build(bctx, cancel, bwho, k, resolved, sc, tplIDs, a.Pool)
	}()
	return k.name, nil
}

// unquotePlan accepts a plan passed as a JSON string (some clients send
// objects that way).
func unquotePlan(raw json.RawMessage) json.RawMessage {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return json.RawMessage(s)
	}
	return raw
}

// planProblems is a refused plan: every problem, one per line.
func planProblems(problems []Problem) error {
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = p.String()
	}
	head := "the plan is invalid, nothing was cloned"
	if len(lines) == 1 {
		return hostapi.Failf("fix the plan and call stand_apply again", "%s: %s", head, lines[0])
	}
	return hostapi.Failf("fix the plan and call stand_apply again", "%s (%d problems):\n- %s", head, len(lines), strings.Join(lines, "\n- "))
}

func storeError(err error) error {
	var busy *store.StandsBusyError
	var exists *store.StandExistsError
	switch {
	case errors.As(err, &busy):
		return hostapi.Failf("wait for one to finish (stand_status), or stand_destroy one", "%v", err)
	case errors.As(err, &exists):
		return hostapi.Failf("stand_status shows it; resume=true continues an interrupted one, stand_destroy removes it", "%v", err)
	}
	return err
}

// Destroyed is what Destroy removed, and what it could not.
type Destroyed struct {
	VMIDs  []int
	Failed []map[string]any // vmid, name, error
}

// Destroy removes every <owner>-repro-<stand>-* VM of the caller's and
// forgets the stand; a stand still building is refused unless force, which
// stops its builder first (in this process or another).
func (s *Service) Destroy(ctx context.Context, who *hostapi.Caller, bench, name string, force bool) (Destroyed, error) {
	k := key{bench, who.Owner(), name}
	var out Destroyed
	if st := s.o.Store; st != nil {
		if _, err := s.refresh(ctx, bench, k.owner); err != nil {
			return out, err
		}
		rec, ok, err := st.StandOf(ctx, k.bench, k.owner, k.name)
		if err != nil {
			return out, err
		}
		if ok && rec.Status == store.StandRunning {
			if !force {
				return out, hostapi.Failf("wait for it (stand_status), or pass force=true to stop the build first", "stand %s is still building", name)
			}
			if err := s.stop(ctx, k); err != nil {
				return out, err
			}
		}
	}
	vms, err := who.MyVMs(ctx)
	if err != nil {
		return out, err
	}
	prefix := VMName(k.owner, name, "")
	for _, vm := range vms {
		if !strings.HasPrefix(vm.Name, prefix) {
			continue
		}
		if err := destroyVM(ctx, who, vm.VMID); err != nil {
			out.Failed = append(out.Failed, map[string]any{"vmid": vm.VMID, "name": vm.Name, "error": err.Error()})
			continue
		}
		out.VMIDs = append(out.VMIDs, vm.VMID)
	}
	sort.Ints(out.VMIDs)
	if st := s.o.Store; st != nil && len(out.Failed) == 0 {
		if err := st.DeleteStand(ctx, k.bench, k.owner, k.name); err != nil {
			return out, err
		}
	}
	return out, nil
}

func destroyVM(ctx context.Context, who *hostapi.Caller, vmid int) error {
	v, release, err := who.LockVM(ctx, vmid)
	if err != nil {
		return err
	}
	defer release()
	r, err := v.Destroy(ctx, taskWait)
	if err != nil {
		return err
	}
	return r.Err()
}

// stop asks a build to stop and waits until its builder has let go. A build
// of this service is cancelled through its context and waited for; one of
// another process is asked through the store (its builder reads the flag),
// and waited for until the record says it stopped or the builder is gone.
func (s *Service) stop(ctx context.Context, k key) error {
	st := s.o.Store
	if _, err := st.UpdateStand(ctx, k.bench, k.owner, k.name, time.Now().UTC(), func(rec *store.Stand) error {
		rec.Cancel = true
		return nil
	}); err != nil {
		return err
	}
	s.mu.Lock()
	b := s.running[k]
	s.mu.Unlock()
	if b != nil {
		b.cancel(errDestroyed)
		select {
		case <-b.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rec, ok, err := st.StandOf(ctx, k.bench, k.owner, k.name)
		if err != nil {
			return err
		}
		if !ok || rec.Status != store.StandRunning || !st.Present(rec.Builder) {
			return nil
		}
		if time.Now().After(deadline) {
			return hostapi.Failf("try again; stand_status shows what it is doing", "stand %s: its builder did not stop within 2 minutes", k.name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Plan asks the planner model for a plan for goal, checked against what
// the caller has.
func (s *Service) Plan(ctx context.Context, who *hostapi.Caller, bench, goal string) (Answer, error) {
	if s.o.Planner == nil {
		return Answer{}, hostapi.Failf("configure [planner] (api, model, key_env) or PV_AI_PLAN_API/PV_AI_PLAN_KEY (default: the vision ones); or write the plan yourself and call stand_apply", "the planner model is not configured")
	}
	env, _, err := s.env(ctx, who, bench, false)
	if err != nil {
		return Answer{}, err
	}
	env.Building = 0 // a plan is not a build: the limit is stand_apply's
	return s.o.Planner.Plan(ctx, goal, env)
}

// CompilePlan checks a plan as Apply would and answers the module it
// compiles to (`poligon stand compile`).
func (s *Service) CompilePlan(ctx context.Context, who *hostapi.Caller, bench string, plan []byte) ([]byte, error) {
	env, _, err := s.env(ctx, who, bench, false)
	if err != nil {
		return nil, err
	}
	env.Building = 0 // compiling builds nothing
	r, problems := Check(unquotePlan(plan), env)
	if len(problems) > 0 {
		return nil, planProblems(problems)
	}
	return Compile(r), nil
}

// Prompt answers the planner's system prompt for the caller (`poligon stand
// plan --prompt`).
func (s *Service) Prompt(ctx context.Context, who *hostapi.Caller, bench string) (string, error) {
	env, _, err := s.env(ctx, who, bench, false)
	if err != nil {
		return "", err
	}
	notes, err := LoadNotes(s.o.Notes)
	if err != nil {
		return "", err
	}
	return SystemPrompt(env, notes), nil
}

// BuiltBy reports whether the caller's stand is being built by a live
// builder in process pid (`poligon stand apply` waits for its detached
// builder to take the stand).
func (s *Service) BuiltBy(ctx context.Context, who *hostapi.Caller, bench, name string, pid int) bool {
	if s.o.Store == nil {
		return false
	}
	st, ok, err := s.o.Store.StandOf(ctx, bench, who.Owner(), name)
	return err == nil && ok && st.Status == store.StandRunning && strings.HasPrefix(st.Builder, builderPrefix(pid)) &&
		s.o.Store.Present(st.Builder)
}

// builderPrefix starts the id of every builder in process pid.
func builderPrefix(pid int) string { return fmt.Sprintf("builder-%d-", pid) }
