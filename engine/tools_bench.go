package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/hostapi"
)

// The bench tools: which benches there are and who holds them, leases, and
// the power and virtual media of physical machines (a PiKVM, a BMC), whose
// console the ui_ tools drive as vmid 1.

type benchStatusArgs struct{}

type benchLeaseArgs struct {
	Minutes int `json:"minutes" desc:"from now; extends your own lease" min:"1" max:"480"`
}

type benchReleaseArgs struct{}

type benchPowerArgs struct {
	Action  string `json:"action" desc:"off is graceful, reset hard" enum:"status,on,off,off-hard,reset,cycle"`
	Confirm bool   `json:"confirm,omitempty" desc:"for a bench that asks for it" default:"false"`
}

type benchMediaArgs struct {
	Action  string `json:"action" enum:"list,mount,eject"`
	Image   string `json:"image,omitempty" desc:"mount: an image on the device (from list)"`
	Filter  string `json:"filter,omitempty" desc:"list: names containing this"`
	Mode    string `json:"mode,omitempty" desc:"mount: as a CD or a USB flash drive" default:"cd" enum:"cd,flash"`
	Storage string `json:"storage,omitempty" desc:"mount: fetch from this http storage (storage_list) ..."`
	Path    string `json:"path,omitempty" desc:"... at this path in it"`
	Boot    bool   `json:"boot,omitempty" desc:"mount: boot from it once at the next start" default:"false"`
	Confirm bool   `json:"confirm,omitempty" desc:"for a bench that asks for it" default:"false"`
}

type storageListArgs struct{}

func benchTools() []*Tool {
	return []*Tool{
		// The listings open no bench: a caller the default bench refuses may
		// still learn which benches it may use.
		newTool(Def{Name: "bench_status", Toolset: "bench", Title: "List the benches", NoBench: true,
			Description: "The benches as TSV: name, type, api, whether you may use it, lease, power state, description.",
			Summary:     "The benches: TSV name, type, api, whether you may use it, lease, power (physical machines), description",
			Effect:      readOnly("lists the benches, their leases and power states")}, benchStatus),
		newTool(Def{Name: "bench_lease", Toolset: "bench", Title: "Lease a bench",
			Description: "Lease a physical bench so nobody else uses it; refused while another holds it. A rental bench's tools need your lease.",
			Summary:     "Lease a physical bench (extends your own); refused while another holds it, naming the holder and the end",
			Effect:      additive("takes or extends a lease: nothing is lost")}, benchLease),
		newTool(Def{Name: "bench_release", Toolset: "bench", Title: "Release a bench",
			Description: "End your lease of a bench.",
			Summary:     "End your lease of a bench",
			Effect:      additiveOnce("ends the caller's own lease")}, benchRelease),
		newTool(Def{Name: "bench_power", Toolset: "bench", Title: "Power a physical machine",
			Description: "Power a physical machine. What is allowed is the bench operator's choice; some ask for confirm=true or a human's approval.",
			Summary:     "A physical machine's power: `status`, `on`, `off` (graceful), `off-hard`, `reset`, `cycle`; a BMC's answer waits (up to 30 s) for the state to follow, and says `accepted` when it has not yet",
			Effect:      destructive("powers a physical machine off or resets it")}, benchPower),
		newTool(Def{Name: "bench_media", Toolset: "bench", Title: "Virtual media",
			Description: "Virtual media of a physical machine: list images, mount one as CD or flash drive (from the device or an http storage), eject.",
			Summary:     "Virtual media: `list`, `mount` (an image on the device, or fetched from an http storage; `cd` or `flash`), `eject`",
			Effect:      destructive("swaps the installer media under a machine that may be reading it")}, benchMedia),
		newTool(Def{Name: "storage_list", Toolset: "bench", Title: "List the storages", NoBench: true,
			Description: "The storages install images come from (bench_media) as TSV: name, type, address, user, description.",
			Summary:     "The storages install images live on: TSV name, type, address, user, description",
			Effect:      readOnly("lists the configured storages")}, storageList),
	}
}

func benchStatus(ctx context.Context, c *Call, in *benchStatusArgs) (*mcp.CallToolResult, error) {
	s := c.Server
	rows := [][]string{{"name", "type", "api", "usable", "lease", "power", "description"}}
	for _, name := range s.app.BenchNames() {
		bc, _ := s.cfg.Bench(name)
		row := []string{name, bc.Type, apiHost(bc.API), "yes", "-", "-", bc.Description}
		who, err := s.Caller(ctx, c.Creds, name)
		if err != nil {
			row[3] = "no: " + err.Error()
			rows = append(rows, row)
			continue
		}
		if bc.Physical() {
			row[4], row[3] = leaseCell(ctx, who, bc.Rental)
			if p, ok := who.Backend().(backends.Power); ok {
				if st, err := p.PowerState(ctx); err == nil {
					row[5] = st
				} else {
					row[5] = "unknown"
				}
			}
		}
		rows = append(rows, row)
	}
	return text("%s", strings.TrimRight(tsv(rows), "\n")), nil
}

// apiHost is the API's scheme and host: where the bench is, without paths
// or credentials.
func apiHost(api string) string {
	u, err := url.Parse(api)
	if err != nil || u.Host == "" {
		return "-"
	}
	return u.Scheme + "://" + u.Host
}

// leaseCell answers the lease column and whether the caller may use the
// bench now.
func leaseCell(ctx context.Context, who *hostapi.Caller, rental bool) (lease, usable string) {
	l, err := who.BenchLease(ctx)
	switch {
	case err != nil:
		return "unknown", "no: " + err.Error()
	case l == nil && rental:
		return "free", "lease it first"
	case l == nil:
		return "free", "yes"
	}
	cell := fmt.Sprintf("%s until %s", l.Holder, l.Until.UTC().Format(time.RFC3339))
	if l.Holder == who.Owner() {
		return cell, "yes (your lease)"
	}
	if rental {
		return cell, "no: leased by " + l.Holder
	}
	return cell, "yes (leased by " + l.Holder + ")"
}

func benchLease(ctx context.Context, c *Call, in *benchLeaseArgs) (*mcp.CallToolResult, error) {
	l, err := c.Caller.Lease(ctx, time.Duration(in.Minutes)*time.Minute)
	if err != nil {
		return nil, err
	}
	return text("leased %s until %s (%d min)", l.Bench, l.Until.UTC().Format(time.RFC3339), in.Minutes), nil
}

func benchRelease(ctx context.Context, c *Call, in *benchReleaseArgs) (*mcp.CallToolResult, error) {
	if err := c.Caller.Release(ctx); err != nil {
		return nil, err
	}
	return text("released"), nil
}

// consent is what the call brings for an action its bench wants approved.
func consent(c *Call, confirm bool) hostapi.Consent {
	con := hostapi.Consent{Confirm: confirm}
	if r := c.Request; r != nil && r.Session != nil {
		if ip := r.Session.InitializeParams(); ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil {
			con.CanAsk = true
		}
	}
	if r := c.Request; r != nil && r.Params != nil {
		if res, ok := r.Params.InputResponses["approve"].(*mcp.ElicitResult); ok && res.Action == "accept" {
			con.Asked = true
		}
	}
	return con
}

// gated runs an action that a bench's gates may stop: a question for the
// human goes to the client (elicitation), and a declined one is a refusal
// that changed nothing. (A dry run is answered for every tool in call.)
func gated(c *Call, act func(hostapi.Consent) (string, error), confirm bool) (*mcp.CallToolResult, error) {
	con := consent(c, confirm)
	if r := c.Request; r != nil && r.Params != nil {
		if res, ok := r.Params.InputResponses["approve"].(*mcp.ElicitResult); ok && res.Action != "accept" {
			return nil, hostapi.Failf("nothing was done", "the action was not approved (%s)", res.Action)
		}
	}
	done, err := act(con)
	var ask *hostapi.ConsentNeeded
	switch {
	case errors.As(err, &ask):
		return &mcp.CallToolResult{
			InputRequests: mcp.InputRequestMap{"approve": &mcp.ElicitParams{
				Message:         ask.Question,
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}},
			}},
			RequestState: "approve",
		}, nil
	case err != nil:
		return nil, err
	}
	return text("%s", done), nil
}

// onMachine runs fn on the machine of a physical bench.
func onMachine(ctx context.Context, c *Call, fn func(v *hostapi.VM) (*mcp.CallToolResult, error)) (*mcp.CallToolResult, error) {
	if _, ok := c.Caller.Machine(); !ok {
		return nil, hostapi.Failf("pass bench= naming a physical bench (bench_status lists them); VMs have vm_start, vm_stop and vm_create_iso",
			"this bench runs VMs, it is not a physical machine")
	}
	return withVM(ctx, c, hostapi.MachineVMID, fn)
}

// powerAfter is the state each power action leaves the machine in.
var powerAfter = map[string]string{"on": "on", "off": "off", "off-hard": "off", "reset": "on", "cycle": "on"}

func benchPower(ctx context.Context, c *Call, in *benchPowerArgs) (*mcp.CallToolResult, error) {
	return onMachine(ctx, c, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		if in.Action == "status" {
			st, err := v.PowerState(ctx)
			if err != nil {
				return nil, err
			}
			return text("power %s", st), nil
		}
		return gated(c, func(con hostapi.Consent) (string, error) {
			if err := v.Power(ctx, in.Action, con); err != nil {
				return "", err
			}
			st, _ := v.PowerState(ctx)
			if want := powerAfter[in.Action]; st != want && st != "unknown" {
				// A controller answers before the machine acts (and an OS
				// may ignore ACPI): "done; now on" would read as a failure
				// to retry, and a retried reset resets twice.
				return fmt.Sprintf("power %s accepted; the machine still reports %s: it has not followed yet (check with action=status; repeating the action would do it twice)", in.Action, st), nil
			}
			return fmt.Sprintf("power %s done; now %s", in.Action, st), nil
		}, in.Confirm)
	})
}

func benchMedia(ctx context.Context, c *Call, in *benchMediaArgs) (*mcp.CallToolResult, error) {
	return onMachine(ctx, c, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		switch in.Action {
		case "list":
			imgs, st, err := v.Media(ctx)
			if err != nil {
				return nil, err
			}
			sort.Slice(imgs, func(i, j int) bool { return imgs[i].Name < imgs[j].Name })
			rows := [][]string{{"image", "size"}}
			for _, im := range imgs {
				if in.Filter == "" || strings.Contains(strings.ToLower(im.Name), strings.ToLower(in.Filter)) {
					rows = append(rows, []string{im.Name, strconv.FormatInt(im.Size, 10)})
				}
			}
			state := "drive: empty"
			if st.Connected {
				state = fmt.Sprintf("drive: %s connected as %s", st.Image, st.Mode)
			} else if st.Image != "" {
				state = fmt.Sprintf("drive: %s selected, not connected", st.Image)
			}
			return text("%s%s", tsv(rows), state), nil
		case "eject":
			return gated(c, func(con hostapi.Consent) (string, error) {
				return "ejected", v.MediaEject(ctx, con)
			}, in.Confirm)
		}
		m := backends.MediaMount{Image: in.Image, Mode: in.Mode, BootOnce: in.Boot}
		if in.Storage != "" {
			u, err := storageURL(c, in.Storage, in.Path)
			if err != nil {
				return nil, err
			}
			m.URL = u
		}
		return gated(c, func(con hostapi.Consent) (string, error) {
			if err := v.MediaMount(ctx, m, con); err != nil {
				return "", err
			}
			return fmt.Sprintf("mounted as %s", m.Mode), nil
		}, in.Confirm)
	})
}

// storageURL is where an image on an http storage is.
func storageURL(c *Call, name, path string) (string, error) {
	var names []string
	for _, st := range c.Server.cfg.Storages {
		names = append(names, st.Name)
		if st.Name != name {
			continue
		}
		if st.Type != "http" {
			return "", hostapi.Failf("mount an image already on the device (bench_media list), or use an http storage",
				"storage %s is %s: a bench fetches images over http only", name, st.Type)
		}
		if path == "" || strings.Contains(path, "..") {
			return "", hostapi.Failf("give the image's path under the storage, e.g. path=debian-12.iso", "a path is needed, without ..")
		}
		return strings.TrimRight(st.Address, "/") + "/" + strings.TrimLeft(path, "/"), nil
	}
	return "", hostapi.Failf("storages: "+strings.Join(names, ", "), "unknown storage %q", name)
}

func storageList(ctx context.Context, c *Call, in *storageListArgs) (*mcp.CallToolResult, error) {
	rows := [][]string{{"name", "type", "address", "user", "description"}}
	for _, st := range c.Server.cfg.Storages {
		rows = append(rows, []string{st.Name, st.Type, st.Address, st.User, st.Description})
	}
	if len(rows) == 1 {
		return text("no storages configured"), nil
	}
	return text("%s", strings.TrimRight(tsv(rows), "\n")), nil
}
