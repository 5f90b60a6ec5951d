package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/engine/catalog"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/trace"
)

// The commands of `poligon run`, `poligon check` and `poligon replay`.

// RunRequest is one `poligon run`.
type RunRequest struct {
	File     string            // the script file
	VMID     int               // run on this VM (the caller's) ...
	Template string            // ... or on a fresh linked clone of this template (name or vmid)
	Keep     bool              // keep that clone afterwards
	Params   map[string]string // the script's params
	Bench    string
	Hooks    catalog.RunHooks
	Progress func(format string, args ...any) // what the command is doing around the run
}

// RunFile runs a script file on a VM as the config's owner (`poligon
// run`): the file is loaded on top of the app's scripts and recipes.
func (a *App) RunFile(ctx context.Context, req RunRequest) (catalog.RunOutcome, error) {
	say := req.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	data, err := os.ReadFile(req.File)
	if err != nil {
		return catalog.RunOutcome{}, err
	}
	sc, err := a.Scripts.Prepare(ctx, req.File, data)
	if err != nil {
		return catalog.RunOutcome{}, err
	}

	who, err := a.Caller(ctx, a.Local(), req.Bench)
	if err != nil {
		return catalog.RunOutcome{}, err
	}
	bench := req.Bench
	if bench == "" {
		bench = a.Config.DefaultBench
	}
	ctx = trace.WithScope(ctx, trace.Scope{Bench: bench, Caller: who.Owner(), Source: trace.SourceRun})
	vmid := req.VMID
	if req.Template != "" {
		vmid, err = a.freshVM(ctx, who, req.Template, sc.Name, say)
		// The clone is destroyed however the run ends (unless --keep): a
		// failed boot or a Ctrl-C must not leave it running.
		if vmid != 0 && !req.Keep {
			defer func() {
				if v, release, err := who.LockVM(context.Background(), vmid); err == nil {
					say("destroying vmid %d (--keep keeps it)", vmid)
					r, err := v.Destroy(context.Background(), 50*time.Second)
					if err == nil {
						err = r.Err()
					}
					if err != nil {
						say("vmid %d was not destroyed: %v", vmid, err)
					}
					release()
				}
			}()
		}
		if err != nil {
			return catalog.RunOutcome{}, err
		}
	}
	v, release, err := who.LockVM(ctx, vmid)
	if err != nil {
		return catalog.RunOutcome{}, err
	}
	defer release()
	who.ForScript()
	say("running %s on vmid %d (%s)", sc.Name, vmid, v.Info().Name)
	out, err := a.Scripts.Run(ctx, v, sc, req.Params, req.Hooks)
	if err == nil && out.Shot != nil && a.Config.EvidenceDir != "" {
		path := fmt.Sprintf("run-%s-vm%d-%s.png", sc.Name, vmid, time.Now().UTC().Format("20060102-150405"))
		if saved, serr := who.SaveShot(*out.Shot, path); serr == nil {
			say("saved the last screenshot as %s", filepath.Join(a.Config.EvidenceDir, saved))
		}
	}
	return out, err
}

// freshVM clones a template (by name or vmid), starts it and waits for its
// guest agent. Once the clone exists its vmid is answered, with or without
// an error, so the caller can remove it.
func (a *App) freshVM(ctx context.Context, who *hostapi.Caller, template, script string, say func(string, ...any)) (int, error) {
	tpls, err := who.Templates(ctx)
	if err != nil {
		return 0, err
	}
	tid := 0
	for _, t := range tpls {
		if t.Name == template || strconv.Itoa(t.VMID) == template {
			tid = t.VMID
		}
	}
	if tid == 0 {
		return 0, hostapi.Failf("poligon serve's vm_list_templates lists them; the local backend: make tiny-template", "no template %q", template)
	}
	name := fmt.Sprintf("run-%s-%d", strings.ReplaceAll(script, "_", "-"), time.Now().Unix()%1000000)
	say("cloning %s as %s", template, who.VMName(name))
	p, err := who.Provision(ctx, hostapi.Provision{
		Clone:     hostapi.CloneSpec{Template: tid, Name: name, Wait: 5 * time.Minute},
		AgentWait: 5 * time.Minute,
		Booting:   func() error { say("starting %s", who.VMName(name)); return nil },
	})
	if err == nil {
		say("booted in %.1f s", p.Booted.Seconds())
	}
	return p.VMID, err
}
