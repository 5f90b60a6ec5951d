package engine

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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/engine/catalog"
	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/store"
)

// Stands: a plan is checked by stand.Check, compiled by stand.Compile, and
// built here in the background, one goroutine per machine, its progress
// written to the store after every change so that another process (a
// restarted server, `poligon stand status`) sees it. A machine's steps are
// one run of the compiled module (role=..., from=...), through the same
// catalog, locks and transcripts as any script.

// standForget is how long a stopped stand is remembered.
const standForget = 24 * time.Hour

// The timeouts of a machine's build outside its steps.
const (
	standAgentWait = 180 * time.Second // the guest agent after start (the manual's)
	standIPWait    = 60 * time.Second  // a global IPv4 after the agent answers
	standTaskWait  = 600 * time.Second // clone, start, snapshot tasks
)

// Why a build stopped early.
var (
	errStandInterrupted = errors.New("the server stopped while the stand was building")
	errStandDestroyed   = errors.New("destroyed while building")
)

// errNoScripts: stands run recipes and compiled modules through the
// catalog, which the server loads before it serves.
var errNoScripts = errors.New("the scripts are not loaded (the server loads them before serving)")

// standKey names a stand across benches and owners.
type standKey struct{ bench, owner, name string }

func (k standKey) String() string { return k.bench + "/" + k.owner + "/" + k.name }

// standBuilds are the builds this server runs.
type standBuilds struct {
	instance string // this server among the processes and servers sharing the store
	mu       sync.Mutex
	running  map[standKey]*standBuild
}

type standBuild struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// liveServers are the instances of this process that are open: a stand
// whose builder names this pid and an instance not here was built by a
// server since closed (in tests, a "restart").
var liveServers sync.Map

// processStart is this process's start time in clock ticks since boot
// (/proc/self/stat), so a builder id survives pid reuse.
var processStart = procStart(os.Getpid())

func newStandBuilds() *standBuilds {
	var b [6]byte
	rand.Read(b[:])
	sb := &standBuilds{instance: hex.EncodeToString(b[:]), running: map[standKey]*standBuild{}}
	liveServers.Store(sb.instance, true)
	return sb
}

// id is the builder id written into the stands this server builds.
func (sb *standBuilds) id() string {
	return fmt.Sprintf("%d:%d:%s", os.Getpid(), processStart, sb.instance)
}

// builderAlive reports whether the builder a stand names still runs.
func builderAlive(id string) bool {
	parts := strings.SplitN(id, ":", 3)
	if len(parts) != 3 {
		return false
	}
	pid, err1 := strconv.Atoi(parts[0])
	start, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	if pid == os.Getpid() {
		_, ok := liveServers.Load(parts[2])
		return ok
	}
	return procStart(pid) == start && start != 0
}

// procStart answers a process's start time (field 22 of /proc/<pid>/stat),
// 0 when there is no such process.
func procStart(pid int) uint64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// fields after its closing one.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// closeAll interrupts every build and waits for them to record it.
func (sb *standBuilds) closeAll(wait time.Duration) {
	sb.mu.Lock()
	builds := make([]*standBuild, 0, len(sb.running))
	for _, b := range sb.running {
		b.cancel(errStandInterrupted)
		builds = append(builds, b)
	}
	sb.mu.Unlock()
	defer liveServers.Delete(sb.instance)
	deadline := time.After(wait)
	for _, b := range builds {
		select {
		case <-b.done:
		case <-deadline:
			return
		}
	}
}

// standStore answers the store stands live in.
func (s *Server) standStore() (*store.Store, error) {
	if s.store == nil {
		return nil, hostapi.Failf("set state_dir in the config (or POLIGON_STATE): stands are kept in its store", "stands need a state directory")
	}
	return s.store, nil
}

// standEnv reads what a plan is validated against, for this caller.
func (s *Server) standEnv(ctx context.Context, who *hostapi.Caller, benchName string, resume bool) (stand.Env, map[string]int, error) {
	tpls, err := who.Templates(ctx)
	if err != nil {
		return stand.Env{}, nil, err
	}
	ids := map[string]int{}
	env := stand.Env{Owner: who.Owner(), Resume: resume, MaxMachines: s.cfg.Stands.MaxMachines, MaxBuilding: s.cfg.Stands.MaxBuilding}
	for _, t := range tpls {
		env.Templates = append(env.Templates, t.Name)
		ids[t.Name] = t.VMID
	}
	if s.scripts != nil {
		env.Scripts = s.scripts.Manifests()
	}
	vms, err := who.MyVMs(ctx)
	if err != nil {
		return stand.Env{}, nil, err
	}
	for _, v := range vms {
		env.Existing = append(env.Existing, v.Name)
	}
	if s.store != nil {
		list, err := s.refreshStands(ctx, benchName, who.Owner())
		if err != nil {
			return stand.Env{}, nil, err
		}
		for _, st := range list {
			if st.Status == store.StandRunning {
				env.Building++
			}
		}
	}
	return env, ids, nil
}

// refreshStands lists an owner's stands, those whose builder went away
// marked interrupted, those stopped a day ago left out (a new apply deletes
// them): a read writes only when a builder has died.
func (s *Server) refreshStands(ctx context.Context, benchName, owner string) ([]store.Stand, error) {
	now := time.Now().UTC()
	all, err := s.store.Stands(ctx, benchName, owner)
	if err != nil {
		return nil, err
	}
	list := all[:0]
	for _, st := range all {
		if st.Status != store.StandRunning && st.Updated.Before(now.Add(-standForget)) {
			continue
		}
		list = append(list, st)
	}
	for i, st := range list {
		if st.Status != store.StandRunning || builderAlive(st.Builder) {
			continue
		}
		builder := st.Builder
		up, err := s.store.UpdateStand(ctx, benchName, owner, st.Name, now, func(st *store.Stand) error {
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
		m := &st.Machines[i]
		if m.Status != "done" && m.Status != "failed" {
			m.Status = "interrupted"
		}
	}
}

// standApply is one stand_apply: check the plan, record the stand, start
// its build. It answers at once.
type standApply struct {
	Plan   json.RawMessage
	Stand  string // resume: the stand to continue
	Pool   string
	Resume bool
	Bench  string
	Req    string
}

// applyStand checks and starts a build; the answer is the stand's name.
func (s *Server) applyStand(ctx context.Context, who *hostapi.Caller, creds hostapi.Credentials, a standApply) (string, error) {
	if a.Req == "" {
		a.Req = logs.Req(ctx) // this stand_apply's: the build's lines keep it
	}
	st, err := s.standStore()
	if err != nil {
		return "", err
	}
	if s.scripts == nil {
		return "", errNoScripts
	}
	owner := who.Owner()
	var stored store.Stand
	planJSON := a.Plan
	if a.Resume {
		if a.Stand == "" {
			return "", hostapi.Failf("pass stand=<name> with resume=true", "resume needs the stand's name")
		}
		if _, err := s.refreshStands(ctx, a.Bench, owner); err != nil {
			return "", err
		}
		var ok bool
		stored, ok, err = st.StandOf(ctx, a.Bench, owner, a.Stand)
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
	if _, err := st.ForgetStands(ctx, time.Now().UTC().Add(-standForget)); err != nil {
		return "", err
	}
	env, tplIDs, err := s.standEnv(ctx, who, a.Bench, a.Resume)
	if err != nil {
		return "", err
	}
	if p, derr := stand.Decode(planJSON); derr == nil && !a.Resume {
		// A stand the store knows as unfinished is continued, not rebuilt.
		if old, ok, err := st.StandOf(ctx, a.Bench, owner, p.Name); err == nil && ok && (old.Status == store.StandRunning || old.Status == store.StandInterrupted) {
			return "", standStoreError(&store.StandExistsError{Name: p.Name, Status: old.Status})
		}
	}
	resolved, problems := stand.Check(planJSON, env)
	if len(problems) > 0 {
		return "", planProblems(problems)
	}
	if a.Resume && resolved.Name != a.Stand {
		return "", hostapi.Failf("resume takes the stand's own plan (or none)", "the plan is for stand %s, not %s", resolved.Name, a.Stand)
	}
	script := stand.Compile(resolved)
	if _, err := s.scripts.Compile(ctx, "stand:"+resolved.Name+".js", script); err != nil {
		return "", fmt.Errorf("the compiled script of stand %s does not load: %w", resolved.Name, err)
	}
	plan, _ := json.Marshal(resolved.Plan)
	key := standKey{a.Bench, owner, resolved.Name}
	now := time.Now().UTC()
	if a.Resume && env.Building >= env.MaxBuilding {
		// Validation lets a resume past the limit (its own build is not one);
		// the limit still holds for the builds it would add to.
		return "", hostapi.Failf("wait for one to finish (stand_status), or stand_destroy one", "%d stands are building already, at most %d at a time", env.Building, env.MaxBuilding)
	}
	if a.Resume {
		_, err = st.UpdateStand(ctx, key.bench, key.owner, key.name, now, func(rec *store.Stand) error {
			if rec.Status == store.StandRunning {
				return hostapi.Failf("stand_status shows its progress", "stand %s is still building", key.name)
			}
			rec.Status, rec.Builder, rec.Error, rec.Cancel, rec.Ended = store.StandRunning, s.builds.id(), "", false, time.Time{}
			rec.Plan, rec.Script, rec.Req = plan, string(script), a.Req
			for i := range rec.Machines {
				if m := &rec.Machines[i]; m.Status != "done" {
					m.Status, m.Error = "pending", ""
				}
			}
			return nil
		})
	} else {
		rec := store.Stand{Bench: key.bench, Owner: owner, Name: key.name, Plan: plan, Script: string(script),
			Builder: s.builds.id(), Req: a.Req}
		for i, m := range resolved.Machines {
			sm := store.StandMachine{Role: m.Role, Template: resolved.Templates[i], Needs: resolved.Needs[i], Status: "pending"}
			for n, step := range m.Steps {
				sm.Steps = append(sm.Steps, store.StandStep{N: n + 1, Label: step.Label()})
			}
			rec.Machines = append(rec.Machines, sm)
		}
		err = st.CreateStand(ctx, rec, env.MaxBuilding, now)
	}
	if err != nil {
		return "", standStoreError(err)
	}
	// The build outlives the call: its own context, its own caller (the
	// call's one carries the call's progress and wait caps).
	bwho, err := s.Caller(context.WithoutCancel(ctx), creds, a.Bench)
	if err != nil {
		return "", err
	}
	bwho.ForScript()
	bctx, cancel := context.WithCancelCause(logs.WithReq(context.WithoutCancel(ctx), a.Req))
	b := &standBuild{cancel: cancel, done: make(chan struct{})}
	s.builds.mu.Lock()
	s.builds.running[key] = b
	s.builds.mu.Unlock()
	go func() {
		defer close(b.done)
		defer func() {
			s.builds.mu.Lock()
			delete(s.builds.running, key)
			s.builds.mu.Unlock()
		}()
		s.build(bctx, cancel, bwho, key, resolved, script, tplIDs, a.Pool)
	}()
	return key.name, nil
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
func planProblems(problems []stand.Problem) error {
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

func standStoreError(err error) error {
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

// build builds a stand: every machine at once, each one's steps waiting
// for the machines whose address it uses.
func (s *Server) build(ctx context.Context, cancel context.CancelCauseFunc, who *hostapi.Caller, key standKey, r stand.Resolved, script []byte, tplIDs map[string]int, pool string) {
	req := logs.Req(ctx)
	if req == "" {
		req = logs.None
	}
	log := s.log.With("req", req, "stand", key.name, "owner", key.owner, "bench", key.bench)
	log.Info("stand build started", "machines", len(r.Machines))
	start := time.Now()
	go s.watchCancel(ctx, cancel, key)
	sc, err := s.scripts.Compile(ctx, "stand:"+key.name+".js", script)
	done := make(map[string]chan struct{}, len(r.Machines))
	for _, m := range r.Machines {
		done[m.Role] = make(chan struct{})
	}
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel(err)
	}
	if err != nil {
		fail(err)
	}
	var wg sync.WaitGroup
	for i := range r.Machines {
		if err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			mb := &machineBuild{s: s, who: who, key: key, r: r, i: i, sc: sc, tplIDs: tplIDs, pool: pool, done: done, log: log}
			if err := mb.run(ctx); err != nil {
				fail(err)
				return
			}
			close(done[r.Machines[i].Role])
		}()
	}
	wg.Wait()
	cause := context.Cause(ctx)
	cancel(nil)
	now := time.Now().UTC()
	_, uerr := s.store.UpdateStand(context.Background(), key.bench, key.owner, key.name, now, func(st *store.Stand) error {
		st.Builder = ""
		switch {
		case errors.Is(cause, errStandInterrupted):
			markInterrupted(st)
			return nil
		case errors.Is(cause, errStandDestroyed):
			st.Status, st.Error = store.StandFailed, errStandDestroyed.Error()
		case firstErr != nil:
			st.Status, st.Error = store.StandFailed, firstErr.Error()
		default:
			st.Status, st.Error = store.StandDone, ""
		}
		st.Ended = now
		return nil
	})
	if uerr != nil {
		log.Error("stand state not saved", "err", uerr)
	}
	log.Info("stand build ended", "seconds", time.Since(start).Seconds(), "err", firstErr, "cause", cause)
}

// watchCancel stops the build when stand_destroy force=true asks for it
// through the store (from this process or another).
func (s *Server) watchCancel(ctx context.Context, cancel context.CancelCauseFunc, key standKey) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, ok, err := s.store.StandOf(ctx, key.bench, key.owner, key.name)
		if err == nil && (!ok || st.Cancel) {
			cancel(errStandDestroyed)
			return
		}
	}
}

// machineBuild builds one machine of a stand.
type machineBuild struct {
	s      *Server
	who    *hostapi.Caller
	key    standKey
	r      stand.Resolved
	i      int
	sc     *catalog.Script
	tplIDs map[string]int
	pool   string
	done   map[string]chan struct{}
	log    *slog.Logger
}

func (mb *machineBuild) role() string { return mb.r.Machines[mb.i].Role }

// update changes this machine's record in the store.
func (mb *machineBuild) update(fn func(m *store.StandMachine)) (store.StandMachine, error) {
	var out store.StandMachine
	_, err := mb.s.store.UpdateStand(context.Background(), mb.key.bench, mb.key.owner, mb.key.name, time.Now().UTC(), func(st *store.Stand) error {
		if mb.i >= len(st.Machines) || st.Machines[mb.i].Role != mb.role() {
			return fmt.Errorf("stand %s: machine %s is not in its record", mb.key.name, mb.role())
		}
		fn(&st.Machines[mb.i])
		out = st.Machines[mb.i]
		return nil
	})
	return out, err
}

// phase records the start of a named part of the build (and the end of
// the one before).
func (mb *machineBuild) phase(name string) error {
	now := time.Now().UTC()
	_, err := mb.update(func(m *store.StandMachine) {
		if n := len(m.Phases); n > 0 && m.Phases[n-1].Ended.IsZero() {
			m.Phases[n-1].Ended = now
		}
		if m.Started.IsZero() {
			m.Started = now
		}
		m.Status = name
		if name != "done" {
			m.Phases = append(m.Phases, store.StandPhase{Name: name, Started: now})
		}
	})
	return err
}

// run builds the machine: clone, start, agent, address, the steps (after
// the machines it needs), the clean snapshot. Each part already done (a
// resumed build) is skipped.
func (mb *machineBuild) run(ctx context.Context) (err error) {
	role := mb.role()
	m, err := mb.update(func(m *store.StandMachine) { m.Error = "" })
	if err != nil {
		return err
	}
	if m.Status == "done" {
		return nil
	}
	defer func() {
		if err == nil {
			return
		}
		status := "failed"
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			// Stopped by another machine's failure, a destroy or a shutdown.
			err, status = cause, "stopped"
			if errors.Is(cause, errStandInterrupted) {
				status = "interrupted"
			}
		} else {
			err = fmt.Errorf("machine %s: %w", role, err)
		}
		msg := err.Error()
		if status == "stopped" {
			msg = "stopped: " + msg
		}
		mb.update(func(m *store.StandMachine) {
			m.Error, m.Status = msg, status
			if n := len(m.Phases); n > 0 && m.Phases[n-1].Ended.IsZero() {
				m.Phases[n-1].Ended = time.Now().UTC()
			}
		})
	}()
	if err := context.Cause(ctx); ctx.Err() != nil {
		return err // bail before the clone
	}

	// Clone. A VM of the machine's name is the machine (a resumed build
	// whose clone was not recorded yet): Clone answers it instead of a copy.
	if err := mb.phase("cloning"); err != nil {
		return err
	}
	tpl := mb.tplIDs[mb.r.Templates[mb.i]]
	full := mb.who.Backend().Kind() == "pve" // PVE: full clones (the manual's); local: linked overlays
	cr, err := mb.who.CloneVM(ctx, hostapi.CloneSpec{Template: tpl, Name: mb.key.name + "-" + role, Full: full,
		Pool: mb.pool, Network: standNetwork(mb.key), Wait: standTaskWait})
	if err != nil {
		return fmt.Errorf("clone %s: %w", mb.r.Templates[mb.i], err)
	}
	if _, err := mb.update(func(m *store.StandMachine) {
		if m.VMID != 0 && m.VMID != cr.VMID {
			// Its VM went away since (destroyed by hand): a fresh clone runs
			// every step again.
			m.IP = ""
			for i := range m.Steps {
				m.Steps[i] = store.StandStep{N: m.Steps[i].N, Label: m.Steps[i].Label}
			}
		}
		m.VMID, m.Node = cr.VMID, cr.Node
	}); err != nil {
		return err
	}
	if err := cr.Task.Err(); err != nil {
		return fmt.Errorf("clone %s: %w", mb.r.Templates[mb.i], err)
	}
	if !cr.Task.Done {
		if _, err := mb.who.WaitTask(ctx, cr.Task.UPID, standTaskWait); err != nil {
			return err
		}
	}

	// Start, the agent, the address: under the VM's lock.
	if err := mb.phase("booting"); err != nil {
		return err
	}
	ip, err := mb.boot(ctx, cr.VMID)
	if err != nil {
		return err
	}
	if _, err := mb.update(func(m *store.StandMachine) { m.IP = ip }); err != nil {
		return err
	}

	// The machines whose address this one's steps use must be done first.
	if needs := mb.r.Needs[mb.i]; len(needs) > 0 {
		if err := mb.phase("waiting"); err != nil {
			return err
		}
		for _, need := range needs {
			select {
			case <-mb.done[need]:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
	}
	if err := mb.phase("steps"); err != nil {
		return err
	}
	if err := mb.steps(ctx, cr.VMID); err != nil {
		return err
	}
	if err := mb.phase("snapshot"); err != nil {
		return err
	}
	if err := mb.snapshot(ctx, cr.VMID); err != nil {
		return err
	}
	now := time.Now().UTC()
	_, err = mb.update(func(m *store.StandMachine) {
		if n := len(m.Phases); n > 0 && m.Phases[n-1].Ended.IsZero() {
			m.Phases[n-1].Ended = now
		}
		m.Status, m.Ended = "done", now
	})
	mb.log.Info("stand machine done", "role", role, "vmid", cr.VMID, "ip", ip)
	return err
}

// boot starts the VM if needed and waits for its agent and a global IPv4.
func (mb *machineBuild) boot(ctx context.Context, vmid int) (string, error) {
	v, release, err := mb.who.LockVM(ctx, vmid)
	if err != nil {
		return "", err
	}
	defer release()
	if v.Info().Status != "running" {
		r, err := v.Start(ctx, standTaskWait)
		if err != nil {
			return "", fmt.Errorf("start: %w", err)
		}
		if err := r.Err(); err != nil {
			return "", fmt.Errorf("start: %w", err)
		}
	}
	ok, _, err := v.WaitBoot(ctx, standAgentWait)
	if err != nil {
		return "", err
	}
	if !ok {
		if err := context.Cause(ctx); ctx.Err() != nil {
			return "", err
		}
		return "", hostapi.Failf("check the template boots with its guest agent (vm_screenshot shows the console)", "the guest agent did not answer within %s", standAgentWait)
	}
	deadline := time.Now().Add(standIPWait)
	for {
		ip, err := v.IPv4(ctx)
		if err == nil && ip != "" {
			return ip, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = hostapi.Failf("check the template gets an address by DHCP", "no global IPv4 address after %s", standIPWait)
			}
			return "", fmt.Errorf("read the address: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// steps runs the machine's steps from the first unfinished one: one run
// of the compiled module, with the VM's lock held for all of them.
func (mb *machineBuild) steps(ctx context.Context, vmid int) error {
	rec, ok, err := mb.s.store.StandOf(ctx, mb.key.bench, mb.key.owner, mb.key.name)
	if err != nil || !ok {
		return fmt.Errorf("stand %s: its record is gone: %v", mb.key.name, err)
	}
	m := rec.Machines[mb.i]
	from := 1
	for _, st := range m.Steps {
		if st.Ended.IsZero() || st.Error != "" {
			break
		}
		from = st.N + 1
	}
	if from > len(m.Steps) {
		return nil // all done before (a resumed build)
	}
	params := map[string]string{"role": m.Role, "from": strconv.Itoa(from)}
	for _, need := range m.Needs {
		for _, other := range rec.Machines {
			if other.Role == need {
				params["ip_"+need] = other.IP
			}
		}
	}
	v, release, err := mb.who.LockVM(ctx, vmid)
	if err != nil {
		return err
	}
	defer release()
	current := 0
	progress := func(n, of int, label string) {
		current = n
		now := time.Now().UTC()
		mb.update(func(m *store.StandMachine) {
			for i := range m.Steps {
				st := &m.Steps[i]
				if st.N < n && !st.Started.IsZero() && st.Ended.IsZero() {
					st.Ended = now
				}
				if st.N == n {
					st.Label, st.Started, st.Ended, st.Error = label, now, time.Time{}, ""
				}
			}
		})
	}
	out, err := mb.s.scripts.Run(ctx, v, mb.sc, params, catalog.RunHooks{
		Log:      mb.s.log.With("stand", mb.key.name, "role", m.Role, "vmid", vmid).Info,
		Progress: progress,
	})
	now := time.Now().UTC()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	stopped := err != nil && ctx.Err() != nil // a restart, a destroy, another machine's failure
	mb.update(func(m *store.StandMachine) {
		m.Transcript = out.Transcript
		for i := range m.Steps {
			st := &m.Steps[i]
			if st.N == current && st.Ended.IsZero() && !stopped {
				st.Ended, st.Error = now, msg
			}
		}
	})
	if err != nil {
		label := ""
		if current > 0 && current <= len(m.Steps) {
			label = " (" + m.Steps[current-1].Label + ")"
		}
		return fmt.Errorf("step %d%s failed: %w", current, label, err)
	}
	return nil
}

// snapshot takes the clean snapshot, unless a resumed build took it before.
func (mb *machineBuild) snapshot(ctx context.Context, vmid int) error {
	v, release, err := mb.who.LockVM(ctx, vmid)
	if err != nil {
		return err
	}
	defer release()
	if names, err := v.Snapshots(ctx); err == nil && contains(names, "clean") {
		return nil
	}
	r, err := v.Snapshot(ctx, "clean", standTaskWait)
	if err != nil {
		return fmt.Errorf("snapshot clean: %w", err)
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("snapshot clean: %w", err)
	}
	return nil
}

// standNetwork names the network a stand's machines share (the local
// backend's switch; other backends keep the template's).
func standNetwork(k standKey) string { return k.owner + "-" + k.name }

// destroyStand removes every <owner>-repro-<stand>-* VM of the caller's and
// forgets the stand; a stand still building is refused unless force, which
// stops its builder first.
func (s *Server) destroyStand(ctx context.Context, who *hostapi.Caller, benchName, name string, force bool) (destroyed []int, failed []map[string]any, err error) {
	key := standKey{benchName, who.Owner(), name}
	if s.store != nil {
		if _, err := s.refreshStands(ctx, benchName, key.owner); err != nil {
			return nil, nil, err
		}
		rec, ok, err := s.store.StandOf(ctx, key.bench, key.owner, key.name)
		if err != nil {
			return nil, nil, err
		}
		if ok && rec.Status == store.StandRunning {
			if !force {
				return nil, nil, hostapi.Failf("wait for it (stand_status), or pass force=true to stop the build first", "stand %s is still building", name)
			}
			if err := s.stopBuild(ctx, key); err != nil {
				return nil, nil, err
			}
		}
	}
	vms, err := who.MyVMs(ctx)
	if err != nil {
		return nil, nil, err
	}
	prefix := stand.VMName(key.owner, name, "")
	for _, vm := range vms {
		if !strings.HasPrefix(vm.Name, prefix) {
			continue
		}
		if err := destroyVM(ctx, who, vm.VMID); err != nil {
			failed = append(failed, map[string]any{"vmid": vm.VMID, "name": vm.Name, "error": err.Error()})
			continue
		}
		destroyed = append(destroyed, vm.VMID)
	}
	sort.Ints(destroyed)
	if s.store != nil && len(failed) == 0 {
		if err := s.store.DeleteStand(ctx, key.bench, key.owner, key.name); err != nil {
			return destroyed, failed, err
		}
	}
	return destroyed, failed, nil
}

func destroyVM(ctx context.Context, who *hostapi.Caller, vmid int) error {
	v, release, err := who.LockVM(ctx, vmid)
	if err != nil {
		return err
	}
	defer release()
	r, err := v.Destroy(ctx, standTaskWait)
	if err != nil {
		return err
	}
	return r.Err()
}

// stopBuild asks a build to stop (in this process or another, through the
// store) and waits until its builder has let go.
func (s *Server) stopBuild(ctx context.Context, key standKey) error {
	if _, err := s.store.UpdateStand(ctx, key.bench, key.owner, key.name, time.Now().UTC(), func(st *store.Stand) error {
		st.Cancel = true
		return nil
	}); err != nil {
		return err
	}
	s.builds.mu.Lock()
	b := s.builds.running[key]
	s.builds.mu.Unlock()
	if b != nil {
		b.cancel(errStandDestroyed)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rec, ok, err := s.store.StandOf(ctx, key.bench, key.owner, key.name)
		if err != nil {
			return err
		}
		if !ok || rec.Status != store.StandRunning || !builderAlive(rec.Builder) {
			if b != nil {
				<-b.done
			}
			return nil
		}
		if time.Now().After(deadline) {
			return hostapi.Failf("try again; stand_status shows what it is doing", "stand %s: its builder did not stop within 2 minutes", key.name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CompileStand checks a plan for the config's owner on a bench, as
// stand_apply would, and answers the module it compiles to (`poligon stand
// compile`).
func (s *Server) CompileStand(ctx context.Context, plan []byte, benchName string) ([]byte, error) {
	who, benchName, err := s.localCaller(ctx, benchName)
	if err != nil {
		return nil, err
	}
	env, _, err := s.standEnv(ctx, who, benchName, false)
	if err != nil {
		return nil, err
	}
	env.Building = 0 // compiling builds nothing
	r, problems := stand.Check(unquotePlan(plan), env)
	if len(problems) > 0 {
		return nil, planProblems(problems)
	}
	return stand.Compile(r), nil
}

// StandBuiltBy reports whether the config owner's stand is running with
// its builder in process pid (`poligon stand apply` without --wait waits
// for its detached builder to take the stand).
func (s *Server) StandBuiltBy(ctx context.Context, benchName, name string, pid int) bool {
	who, benchName, err := s.localCaller(ctx, benchName)
	if err != nil || s.store == nil {
		return false
	}
	st, ok, err := s.store.StandOf(ctx, benchName, who.Owner(), name)
	return err == nil && ok && st.Status == store.StandRunning && strings.HasPrefix(st.Builder, strconv.Itoa(pid)+":")
}

// localCaller is the config's owner on a bench ("" = the default), as the
// CLI acts.
func (s *Server) localCaller(ctx context.Context, benchName string) (*hostapi.Caller, string, error) {
	if benchName == "" {
		benchName = s.cfg.DefaultBench
	}
	who, err := s.Caller(ctx, localCaller(s.cfg).creds, benchName)
	return who, benchName, err
}

// ErrorText is an error as a tool answers it: error: ... plus hint: ....
func ErrorText(err error) string {
	res := errorResult(err)
	return res.Content[0].(*mcp.TextContent).Text
}

// StandPrompt answers the planner's system prompt for the config's owner on
// a bench (`poligon stand plan --prompt`).
func (s *Server) StandPrompt(ctx context.Context, benchName string) (string, error) {
	who, benchName, err := s.localCaller(ctx, benchName)
	if err != nil {
		return "", err
	}
	env, _, err := s.standEnv(ctx, who, benchName, false)
	if err != nil {
		return "", err
	}
	notes, err := stand.LoadNotes(s.cfg.Planner.Notes)
	if err != nil {
		return "", err
	}
	return stand.SystemPrompt(env, notes), nil
}
