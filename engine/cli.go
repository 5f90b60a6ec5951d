package engine

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

// RunFile runs a script file on a VM from a terminal: the scripts and
// recipes are loaded as the server loads them, then the file on top.
// RunOutcome is a finished script run.
type RunOutcome = catalog.RunOutcome

func (s *Server) RunFile(ctx context.Context, req RunRequest) (RunOutcome, error) {
	if s.scripts == nil {
		if err := s.LoadScripts(ctx); err != nil {
			return RunOutcome{}, err
		}
	}
	say := req.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	data, err := os.ReadFile(req.File)
	if err != nil {
		return RunOutcome{}, err
	}
	sc, err := s.scripts.Prepare(ctx, req.File, data)
	if err != nil {
		return RunOutcome{}, err
	}

	who, err := s.Caller(ctx, localCaller(s.cfg).creds, req.Bench)
	if err != nil {
		return RunOutcome{}, err
	}
	vmid := req.VMID
	if req.Template != "" {
		vmid, err = s.freshVM(ctx, who, req.Template, sc.Name, say)
		// The clone is destroyed however the run ends (unless --keep): a
		// failed boot or a Ctrl-C must not leave it running.
		if vmid != 0 && !req.Keep {
			defer func() {
				if v, release, err := who.LockVM(context.Background(), vmid); err == nil {
					say("destroying vmid %d (--keep keeps it)", vmid)
					v.Destroy(context.Background(), 50)
					release()
				}
			}()
		}
		if err != nil {
			return RunOutcome{}, err
		}
	}
	v, release, err := who.LockVM(ctx, vmid)
	if err != nil {
		return RunOutcome{}, err
	}
	defer release()
	who.ForScript()
	say("running %s on vmid %d (%s)", sc.Name, vmid, v.Info().Name)
	out, err := s.scripts.Run(ctx, v, sc, req.Params, req.Hooks)
	if err == nil && out.Shot != nil && s.cfg.EvidenceDir != "" {
		path := fmt.Sprintf("run-%s-vm%d-%s.png", sc.Name, vmid, time.Now().UTC().Format("20060102-150405"))
		if saved, serr := who.SaveShot(*out.Shot, path); serr == nil {
			say("saved the last screenshot as %s", filepath.Join(s.cfg.EvidenceDir, saved))
		}
	}
	return out, err
}

// freshVM clones a template (by name or vmid), starts it and waits for its
// guest agent. Once the clone exists its vmid is answered, with or without
// an error, so the caller can remove it.
func (s *Server) freshVM(ctx context.Context, who *hostapi.Caller, template, script string, say func(string, ...any)) (int, error) {
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
	res, err := who.Clone(ctx, tid, name, false, "", 50*time.Second)
	if err != nil {
		return 0, err
	}
	if err := res.Task.Err(); err != nil {
		return res.VMID, err
	}
	v, release, err := who.LockVM(ctx, res.VMID)
	if err != nil {
		return res.VMID, err
	}
	defer release()
	say("starting vmid %d", res.VMID)
	if r, err := v.Start(ctx, 50*time.Second); err != nil {
		return res.VMID, err
	} else if err := r.Err(); err != nil {
		return res.VMID, err
	}
	for i := 0; i < 6; i++ {
		ok, took, err := v.WaitBoot(ctx, 50*time.Second)
		if err != nil {
			return res.VMID, err
		}
		if ok {
			say("booted in %.1f s", took.Seconds())
			return res.VMID, nil
		}
	}
	return res.VMID, hostapi.Failf("look at the VM's console (ui_screenshot) or its serial log", "vmid %d did not boot in 5 minutes", res.VMID)
}
