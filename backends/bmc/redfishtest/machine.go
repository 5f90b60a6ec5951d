package redfishtest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/poligon/poligon/backends/qmp"
)

// qmpDo runs f on the machine's monitor, dialling it on first use and
// again after a failure that was not QEMU's own answer.
func (s *Server) qmpDo(ctx context.Context, f func(*qmp.Client) error) error {
	s.qmpMu.Lock()
	defer s.qmpMu.Unlock()
	if s.qmpC == nil {
		c, err := qmp.Dial(ctx, s.opts.QMP)
		if err != nil {
			return err
		}
		s.qmpC = c
	}
	err := f(s.qmpC)
	var qerr *qmp.Error
	if err != nil && !errors.As(err, &qerr) {
		s.qmpC.Close()
		s.qmpC = nil
	}
	return err
}

func (s *Server) qmpRun(ctx context.Context, cmds ...string) error {
	return s.qmpDo(ctx, func(c *qmp.Client) error {
		for _, cmd := range cmds {
			if err := c.Execute(ctx, cmd, nil, nil); err != nil {
				return fmt.Errorf("%s: %w", cmd, err)
			}
		}
		return nil
	})
}

// powered reads QEMU's run state: a running (or debugged, or suspended)
// guest is On; paused, prelaunch (after our ForceOff) and shutdown (the
// guest powered itself off under -no-shutdown) are Off.
func (s *Server) powered(ctx context.Context) (bool, string, error) {
	var st qmp.Status
	err := s.qmpDo(ctx, func(c *qmp.Client) error {
		var err error
		st, err = c.QueryStatus(ctx)
		return err
	})
	if err != nil {
		return false, "", err
	}
	switch st.Status {
	case "running", "debug", "suspended", "guest-panicked", "internal-error", "io-error":
		return true, st.Status, nil
	}
	return false, st.Status, nil
}

func (s *Server) internalError(err error) reply {
	return fail(http.StatusInternalServerError, s.baseError("InternalError",
		"The request failed due to an internal service error.  The service is still operational. ("+err.Error()+")"))
}

func (s *Server) qctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// --- ComputerSystem -----------------------------------------------------------

func (s *Server) systemBody() reply {
	ctx, cancel := s.qctx()
	defer cancel()
	s.powerMu.Lock()
	on, _, err := s.powered(ctx)
	s.powerMu.Unlock()
	if err != nil {
		return s.internalError(err)
	}
	d := s.d
	state := "Off"
	if on {
		state = "On"
	}
	s.mu.Lock()
	boot := s.boot
	s.mu.Unlock()
	body := map[string]any{
		"@odata.id": d.systemPath(), "@odata.type": "#ComputerSystem.v1_12_0.ComputerSystem",
		"Id": d.systemID, "Name": "System", "SystemType": "Physical",
		"Manufacturer": d.manufacturer, "Model": d.model, "SerialNumber": "FAKE0001",
		"PowerState": state,
		"Status":     map[string]string{"State": "Enabled", "Health": "OK"},
		"Boot": map[string]any{
			"BootSourceOverrideEnabled":                        boot.enabled,
			"BootSourceOverrideTarget":                         boot.target,
			"BootSourceOverrideMode":                           boot.mode,
			"BootSourceOverrideTarget@Redfish.AllowableValues": d.bootTargets,
		},
		"Links": map[string]any{"ManagedBy": []any{map[string]string{"@odata.id": d.managerPath()}}},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target":                            d.systemPath() + "/Actions/ComputerSystem.Reset",
			"ResetType@Redfish.AllowableValues": d.resetTypes,
		}},
	}
	if d.mediaOnSystem {
		body["VirtualMedia"] = map[string]string{"@odata.id": d.mediaCollection()}
	}
	return ok(body)
}

func (s *Server) system(c *call) reply {
	switch c.method {
	case http.MethodGet:
		return s.withETag(s.systemBody())
	case http.MethodPatch:
		return s.patchSystem(c)
	}
	return s.notAllowed(c)
}

func (s *Server) patchSystem(c *call) reply {
	if s.d.patchNeedsIfMatch && c.ifTag == "" {
		return fail(http.StatusPreconditionRequired, s.baseError("PreconditionRequired",
			"A precondition header or annotation is required to change this resource."))
	}
	if rep, ok := s.checkIfMatch(c, s.systemBody); !ok {
		return rep
	}
	var req map[string]map[string]string
	if err := c.json(&req); err != nil {
		return fail(http.StatusBadRequest, s.baseError("MalformedJSON", "The request body submitted was malformed JSON and could not be parsed by the receiving service."))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.boot
	for key, val := range req {
		if key != "Boot" {
			return fail(http.StatusBadRequest, s.baseError("PropertyNotWritable", fmt.Sprintf("The property %s is a read only property and cannot be assigned a value.", key)))
		}
		for k, v := range val {
			var allowed []string
			switch k {
			case "BootSourceOverrideTarget":
				allowed, next.target = s.d.bootTargets, v
			case "BootSourceOverrideEnabled":
				allowed, next.enabled = []string{"Once", "Continuous", "Disabled"}, v
			case "BootSourceOverrideMode":
				allowed, next.mode = []string{"UEFI", "Legacy"}, v
			default:
				return fail(http.StatusBadRequest, s.baseError("PropertyUnknown", fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", k)))
			}
			if !slices.Contains(allowed, v) {
				return fail(http.StatusBadRequest, s.baseError("PropertyValueNotInList", fmt.Sprintf("The value %s for the property %s is not in the list of acceptable values.", v, k)))
			}
		}
	}
	s.boot = next
	return noContent()
}

// consumeBoot records the source of a boot that starts now and retires a
// Once override, as the firmware does at POST. s.mu is not held.
func (s *Server) consumeBoot() {
	s.mu.Lock()
	defer s.mu.Unlock()
	src := "None"
	if s.boot.enabled != "Disabled" {
		src = s.boot.target
	}
	if s.boot.enabled == "Once" {
		s.boot.enabled, s.boot.target = "Disabled", "None"
	}
	s.boots = append(s.boots, src)
}

// acceptedResetTypes is what the firmware acts on: the published list, with
// Supermicro's fused "GracefulShutdownGracefulRestart" standing for both.
func (s *Server) acceptedResetTypes() []string {
	var out []string
	for _, t := range s.d.resetTypes {
		if t == "GracefulShutdownGracefulRestart" {
			out = append(out, "GracefulShutdown", "GracefulRestart")
			continue
		}
		out = append(out, t)
	}
	return out
}

func (s *Server) reset(c *call) reply {
	if rep, ok := s.checkIfMatch(c, s.systemBody); !ok {
		return rep
	}
	var req struct{ ResetType string }
	if err := c.json(&req); err != nil || req.ResetType == "" {
		return fail(http.StatusBadRequest, s.baseError("ActionParameterMissing", "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body."))
	}
	if !slices.Contains(s.acceptedResetTypes(), req.ResetType) {
		return fail(http.StatusBadRequest, s.baseError("ActionParameterNotSupported", fmt.Sprintf("The parameter %s for the action ComputerSystem.Reset is not supported on the target resource.", req.ResetType)))
	}
	// The state read and the action are one step: a lagged action lands
	// either before or after it.
	s.powerMu.Lock()
	defer s.powerMu.Unlock()
	s.mu.Lock()
	busy := s.pending > 0
	s.mu.Unlock()
	if busy {
		return fail(http.StatusConflict, s.baseError("ResourceInUse", "The change to the requested resource failed because the resource is in use or in transition."))
	}
	ctx, cancel := s.qctx()
	defer cancel()
	on, _, err := s.powered(ctx)
	if err != nil {
		return s.internalError(err)
	}
	switch req.ResetType {
	case "On", "ForceOn":
		if !on {
			s.lagged(s.opts.PowerLag, nil, s.powerOn)
		}
	case "ForceOff":
		if on {
			s.lagged(s.opts.PowerLag, nil, func(ctx context.Context) error { return s.qmpRun(ctx, "stop", "system_reset") })
		}
	case "GracefulShutdown":
		if on {
			err = s.qmpRun(ctx, "system_powerdown") // the guest takes its own time, or ignores it
		}
	case "PushPowerButton":
		if on {
			s.lagged(s.opts.PowerLag, nil, func(ctx context.Context) error { return s.qmpRun(ctx, "system_powerdown") })
		} else {
			err = s.powerOn(ctx)
		}
	case "ForceRestart":
		if !on {
			return fail(http.StatusConflict, s.baseError("ActionNotSupported",
				"The action ComputerSystem.Reset with ResetType ForceRestart cannot be performed while the system is powered off."))
		}
		s.consumeBoot()
		err = s.qmpRun(ctx, "system_reset")
	case "GracefulRestart":
		if !on {
			return fail(http.StatusConflict, s.baseError("ActionNotSupported",
				"The action ComputerSystem.Reset with ResetType GracefulRestart cannot be performed while the system is powered off."))
		}
		if err = s.qmpRun(ctx, "system_powerdown"); err == nil {
			s.lagged(0, s.untilOff, s.powerOn)
		}
	case "PowerCycle":
		if !on {
			err = s.powerOn(ctx)
			break
		}
		if err = s.qmpRun(ctx, "stop", "system_reset"); err == nil {
			s.lagged(s.opts.PowerLag, nil, s.powerOn)
		}
	case "Nmi":
		err = s.qmpRun(ctx, "inject-nmi")
	}
	if err != nil {
		return s.internalError(err)
	}
	return noContent()
}

// powerOn starts the machine from any stopped state: system_reset leaves
// a guest that powered itself off ("shutdown") ready to run again.
func (s *Server) powerOn(ctx context.Context) error {
	s.consumeBoot()
	return s.qmpRun(ctx, "system_reset", "cont")
}

// untilOff waits (at most a minute) for a GracefulRestart's guest to power
// off; one that ignores ACPI is left as it is.
func (s *Server) untilOff(ctx context.Context) bool {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if on, _, err := s.powered(ctx); err != nil || !on {
			return err == nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// lagged runs f in the background after lag (and after wait said yes,
// when given); until it has run, power actions are refused as in
// transition. f runs under powerMu, so a state read sees the machine
// either before it or after it.
func (s *Server) lagged(lag time.Duration, wait func(context.Context) bool, f func(context.Context) error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.pending++
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		time.Sleep(lag)
		ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
		defer cancel()
		run := wait == nil || wait(ctx)
		s.powerMu.Lock()
		if run {
			if err := f(ctx); err != nil {
				fmt.Fprintf(s.opts.Log, "redfishtest %s: lagged power action: %v\n", s.d.name, err)
			}
		}
		s.mu.Lock()
		s.pending--
		s.mu.Unlock()
		s.powerMu.Unlock()
	}()
}

// --- Manager ------------------------------------------------------------------

func (s *Server) manager() any {
	d := s.d
	body := map[string]any{
		"@odata.id": d.managerPath(), "@odata.type": "#Manager.v1_10_0.Manager",
		"Id": d.managerID, "Name": "Manager", "ManagerType": "BMC", "FirmwareVersion": "fake",
		"Links": map[string]any{"ManagerForServers": []any{map[string]string{"@odata.id": d.systemPath()}}},
	}
	actions := map[string]any{"#Manager.Reset": map[string]any{
		"target": d.managerPath() + "/Actions/Manager.Reset", "ResetType@Redfish.AllowableValues": []string{"ForceRestart"}}}
	if !d.mediaOnSystem {
		body["VirtualMedia"] = map[string]string{"@odata.id": d.mediaCollection()}
	}
	if d.rmediaGate {
		actions["Oem"] = map[string]any{
			"#AMIVirtualMedia.EnableRMedia": map[string]any{
				"target": d.managerPath() + enableRMediaPath, "RMediaState@Redfish.AllowableValues": []string{"Enable", "Disable"}},
		}
	}
	body["Actions"] = actions
	return body
}

func (s *Server) rmediaOn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rmedia
}

func (s *Server) enableRMedia(c *call) reply {
	var req struct{ RMediaState string }
	if err := c.json(&req); err != nil || (req.RMediaState != "Enable" && req.RMediaState != "Disable") {
		return fail(http.StatusBadRequest, s.baseError("ActionParameterMissing", "The action AMIVirtualMedia.EnableRMedia requires the parameter RMediaState (Enable or Disable)."))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want := req.RMediaState == "Enable"
	if want == s.rmedia {
		state := "disabled"
		if want {
			state = "enabled"
		}
		return fail(http.StatusBadRequest, s.baseError("GeneralError", "RMediaState is already "+state+"."))
	}
	if !want && s.cd.inserted {
		return fail(http.StatusConflict, s.baseError("ResourceInUse", "Remote media cannot be disabled while an image is redirected."))
	}
	s.rmedia = want
	return noContent()
}

// --- Dell's screen capture -----------------------------------------------------

func (s *Server) screenshot(c *call) reply {
	var req struct{ FileType string }
	if err := c.json(&req); err != nil || req.FileType != "ServerScreenShot" {
		return fail(http.StatusBadRequest, s.baseError("ActionParameterValueNotInList", "The value for the parameter FileType is not in the list of acceptable values."))
	}
	file := filepath.Join(s.imageDir, "screen.png")
	ctx, cancel := s.qctx()
	defer cancel()
	err := s.qmpDo(ctx, func(q *qmp.Client) error {
		return q.Execute(ctx, "screendump", map[string]string{"filename": file, "format": "png"}, nil)
	})
	if err != nil {
		return s.internalError(err)
	}
	png, err := os.ReadFile(file)
	os.Remove(file)
	if err != nil {
		return s.internalError(err)
	}
	return ok(map[string]any{"ServerScreenshotFile": base64.StdEncoding.EncodeToString(png)})
}
