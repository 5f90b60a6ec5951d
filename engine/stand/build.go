package stand

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/poligon/poligon/engine/catalog"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/store"
	"github.com/poligon/poligon/internal/trace"
)

// build builds a stand: every machine at once, each one's steps waiting
// for the machines whose address it uses. It ends by recording how the
// stand ended.
func (s *Service) build(ctx context.Context, cancel context.CancelCauseFunc, who *hostapi.Caller, k key, r Resolved, sc *catalog.Script, tplIDs map[string]int, pool string) {
	req := logs.Req(ctx)
	if req == "" {
		req = logs.None
	}
	log := s.o.Log.With("req", req, "stand", k.name, "owner", k.owner, "bench", k.bench)
	log.Info("stand build started", "machines", len(r.Machines))
	start := time.Now()
	go s.watchCancel(ctx, cancel, k)
	done := make(map[string]chan struct{}, len(r.Machines))
	for _, m := range r.Machines {
		done[m.Role] = make(chan struct{})
	}
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for i := range r.Machines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mb := &machineBuild{s: s, who: who, key: k, r: r, i: i, sc: sc, tplIDs: tplIDs, pool: pool, done: done, log: log,
				scope: trace.ScopeOf(ctx), req: req}
			if err := mb.run(ctx); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel(err) // the other machines stop
				return
			}
			close(done[r.Machines[i].Role])
		}()
	}
	wg.Wait()
	cause := context.Cause(ctx)
	cancel(nil)
	now := time.Now().UTC()
	_, uerr := s.o.Store.UpdateStand(context.Background(), k.bench, k.owner, k.name, now, func(st *store.Stand) error {
		st.Builder = ""
		switch {
		case errors.Is(cause, errInterrupted):
			markInterrupted(st)
			return nil
		case errors.Is(cause, errDestroyed):
			st.Status, st.Error = store.StandFailed, errDestroyed.Error()
		case firstErr != nil:
			st.Status, st.Error = store.StandFailed, firstErr.Error()
		default:
			st.Status, st.Error = store.StandDone, ""
		}
		if st.Status == store.StandFailed {
			// A machine whose own record of its end was not written (or that
			// never started) ends stopped, so that a resume can take it.
			for i := range st.Machines {
				if m := &st.Machines[i]; !m.Status.Ended() {
					endPhase(m, now)
					m.Status, m.Error = store.MachineStopped, "stopped: "+st.Error
				}
			}
		}
		st.Ended = now
		return nil
	})
	if uerr != nil {
		log.Error("stand state not saved", "err", uerr)
	}
	log.Info("stand build ended", "seconds", time.Since(start).Seconds(), "err", firstErr, "cause", cause)
}

// cancelPoll is how often a build reads its stand's cancel flag: the one
// way stand_destroy force=true in another process reaches it (in this
// process the build's context is cancelled directly).
const cancelPoll = time.Second

// watchCancel stops the build when the store says a stop was asked, or the
// stand is gone.
func (s *Service) watchCancel(ctx context.Context, cancel context.CancelCauseFunc, k key) {
	t := time.NewTicker(cancelPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, ok, err := s.o.Store.StandOf(ctx, k.bench, k.owner, k.name)
		if err == nil && (!ok || st.Cancel) {
			cancel(errDestroyed)
			return
		}
	}
}

// machineBuild builds one machine of a stand.
type machineBuild struct {
	s      *Service
	who    *hostapi.Caller
	key    key
	r      Resolved
	i      int
	sc     *catalog.Script
	tplIDs map[string]int
	pool   string
	done   map[string]chan struct{}
	log    *slog.Logger
	scope  trace.Scope // the build's, for the phases' steps
	req    string
}

func (mb *machineBuild) role() string { return mb.r.Machines[mb.i].Role }

// update changes this machine's record in the store.
func (mb *machineBuild) update(fn func(m *store.StandMachine)) (store.StandMachine, error) {
	var out store.StandMachine
	_, err := mb.s.o.Store.UpdateStand(context.Background(), mb.key.bench, mb.key.owner, mb.key.name, time.Now().UTC(), func(st *store.Stand) error {
		if mb.i >= len(st.Machines) || st.Machines[mb.i].Role != mb.role() {
			return fmt.Errorf("stand %s: machine %s is not in its record", mb.key.name, mb.role())
		}
		fn(&st.Machines[mb.i])
		out = st.Machines[mb.i]
		return nil
	})
	return out, err
}

// endPhase closes the phase that runs, at t.
func endPhase(m *store.StandMachine, t time.Time) {
	if n := len(m.Phases); n > 0 && m.Phases[n-1].Ended.IsZero() {
		m.Phases[n-1].Ended = t
	}
}

// phase records the start of a part of the build (and the end of the one
// before).
func (mb *machineBuild) phase(name store.MachineStatus) error {
	now := time.Now().UTC()
	_, err := mb.update(func(m *store.StandMachine) {
		mb.traceEnd(m, now, "")
		endPhase(m, now)
		if m.Started.IsZero() {
			m.Started = now
		}
		m.Status = name
		m.Phases = append(m.Phases, store.StandPhase{Name: name, Started: now})
	})
	return err
}

// run builds the machine: provision it (clone, start, agent, address), run
// its steps after the machines it needs, take the clean snapshot. Each part
// already done (a resumed build) is skipped.
func (mb *machineBuild) run(ctx context.Context) (err error) {
	role := mb.role()
	m, err := mb.update(func(m *store.StandMachine) { m.Error = "" })
	if err != nil {
		return err
	}
	if m.Status == store.MachineDone {
		return nil
	}
	defer func() {
		if err != nil {
			err = mb.ended(ctx, err)
		}
	}()
	if err := context.Cause(ctx); ctx.Err() != nil {
		return err // bail before the clone
	}

	if err := mb.phase(store.MachineCloning); err != nil {
		return err
	}
	tpl := mb.r.Templates[mb.i]
	full := mb.who.Backend().Kind() == "pve" // PVE: full clones (the manual's); local: linked overlays
	p, err := mb.who.Provision(ctx, hostapi.Provision{
		// A VM of the machine's name is the machine (a resumed build whose
		// clone was not recorded yet): Provision takes it instead of a copy.
		Clone: hostapi.CloneSpec{Template: mb.tplIDs[tpl], Name: mb.key.name + "-" + role, Full: full,
			Pool: mb.pool, Network: Network(mb.key.owner, mb.key.name), Wait: taskWait},
		AgentWait:   agentWait,
		AddressWait: ipWait,
		Cloned:      mb.cloned,
		Booting:     func() error { return mb.phase(store.MachineBooting) },
	})
	if err != nil {
		return err
	}
	if _, err := mb.update(func(m *store.StandMachine) { m.IP = p.IP }); err != nil {
		return err
	}

	// The machines whose address this one's steps use must be done first.
	if needs := mb.r.Needs[mb.i]; len(needs) > 0 {
		if err := mb.phase(store.MachineWaiting); err != nil {
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
	if err := mb.phase(store.MachineSteps); err != nil {
		return err
	}
	if err := mb.steps(ctx, p.VMID); err != nil {
		return err
	}
	if err := mb.phase(store.MachineSnapshot); err != nil {
		return err
	}
	if err := mb.snapshot(ctx, p.VMID); err != nil {
		return err
	}
	now := time.Now().UTC()
	_, err = mb.update(func(m *store.StandMachine) {
		mb.traceEnd(m, now, "")
		endPhase(m, now)
		m.Status, m.Ended = store.MachineDone, now
	})
	mb.log.Info("stand machine done", "role", role, "vmid", p.VMID, "ip", p.IP)
	return err
}

// cloned records the machine's VM as soon as it exists.
func (mb *machineBuild) cloned(cr hostapi.CloneResult) error {
	_, err := mb.update(func(m *store.StandMachine) {
		if m.VMID != 0 && m.VMID != cr.VMID {
			// Its VM went away since (destroyed by hand): a fresh clone runs
			// every step again.
			m.IP = ""
			for i := range m.Steps {
				m.Steps[i] = store.StandStep{N: m.Steps[i].N, Label: m.Steps[i].Label}
			}
		}
		m.VMID, m.Node = cr.VMID, cr.Node
	})
	return err
}

// ended records how a machine's build stopped early and answers the error
// the stand reports: its own failure, or why it was stopped.
func (mb *machineBuild) ended(ctx context.Context, err error) error {
	status := store.MachineFailed
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
		// Stopped by another machine's failure, a destroy or a shutdown.
		err, status = cause, store.MachineStopped
		if errors.Is(cause, errInterrupted) {
			status = store.MachineInterrupted
		}
	} else {
		err = fmt.Errorf("machine %s: %w", mb.role(), err)
	}
	msg := err.Error()
	if status == store.MachineStopped {
		msg = "stopped: " + msg
	}
	now := time.Now().UTC()
	mb.update(func(m *store.StandMachine) {
		mb.traceEnd(m, now, msg)
		m.Error, m.Status = msg, status
		endPhase(m, now)
	})
	return err
}

// traceEnd records the phase that ends at t as a trace step (msg: why it
// failed). The steps' own host calls are recorded by the catalog.
func (mb *machineBuild) traceEnd(m *store.StandMachine, t time.Time, msg string) {
	n := len(m.Phases)
	if mb.s.o.Trace == nil || n == 0 || !m.Phases[n-1].Ended.IsZero() {
		return
	}
	p := m.Phases[n-1]
	step := mb.scope.Step()
	step.At, step.Took, step.Call, step.Outcome = p.Started, t.Sub(p.Started), "stand."+string(p.Name), "ok"
	step.Owner, step.VMID, step.VM, step.Req = mb.key.owner, m.VMID, VMName(mb.key.owner, mb.key.name, m.Role), mb.req
	step.Args, _ = json.Marshal(map[string]string{"role": m.Role, "template": m.Template})
	if msg != "" {
		step.Outcome, step.Error = "error", msg
	}
	mb.s.o.Trace.Record(step, nil, nil)
}

// steps runs the machine's steps from the first unfinished one: one run
// of the compiled module, with the VM's lock held for all of them.
func (mb *machineBuild) steps(ctx context.Context, vmid int) error {
	rec, ok, err := mb.s.o.Store.StandOf(ctx, mb.key.bench, mb.key.owner, mb.key.name)
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
	out, err := mb.s.o.Scripts.Run(ctx, v, mb.sc, params, catalog.RunHooks{
		Log:      mb.s.o.Log.With("stand", mb.key.name, "role", m.Role, "vmid", vmid).Info,
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
	if names, err := v.Snapshots(ctx); err == nil && slices.Contains(names, "clean") {
		return nil
	}
	r, err := v.Snapshot(ctx, "clean", taskWait)
	if err != nil {
		return fmt.Errorf("snapshot clean: %w", err)
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("snapshot clean: %w", err)
	}
	return nil
}

// Network names the network a stand's machines share (the local backend's
// switch; other backends keep the template's).
func Network(owner, stand string) string { return owner + "-" + stand }
