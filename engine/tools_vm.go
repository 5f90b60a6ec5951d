package engine

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/hostapi"
)

// The VM lifecycle tools: templates, my VMs, clone, start, stop, boot wait,
// snapshots, destroy, task waits.

type listTemplatesArgs struct {
	Filter string `json:"filter,omitempty" desc:"a substring of the name: list the matching templates instead of the families"`
}

type noArgs struct{}

type vmArgs struct {
	VMID int `json:"vmid" min:"1"`
}

type waitArgs struct {
	VMID int     `json:"vmid" min:"1"`
	Wait float64 `json:"wait,omitempty" desc:"seconds to wait" default:"30" min:"0" max:"max_wait"`
}

type taskWaitArgs struct {
	UPID    string  `json:"upid" desc:"the task id an answer named (upid=...)"`
	Timeout float64 `json:"timeout,omitempty" desc:"seconds to wait" default:"50" min:"0" max:"max_wait"`
}

type cloneArgs struct {
	TemplateVMID int     `json:"template_vmid" desc:"from vm_list_templates" min:"1"`
	Name         string  `json:"name,omitempty" desc:"becomes <owner>-repro-<name>; default: the template's name"`
	Full         bool    `json:"full,omitempty" desc:"a full copy, or a linked clone" default:"true"`
	Pool         string  `json:"pool,omitempty" desc:"when you have several (Proxmox)"`
	Wait         float64 `json:"wait,omitempty" desc:"seconds to wait" default:"30" min:"0" max:"max_wait"`
}

type waitBootArgs struct {
	VMID    int     `json:"vmid" min:"1"`
	Timeout float64 `json:"timeout,omitempty" desc:"seconds to wait for the guest agent" call:"waitBoot timeout" min:"0" max:"max_wait"`
}

type snapshotArgs struct {
	VMID int     `json:"vmid" min:"1"`
	Name string  `json:"name" desc:"a letter, then letters, digits, _ or -"`
	Wait float64 `json:"wait,omitempty" desc:"seconds to wait" default:"30" min:"0" max:"max_wait"`
}

type destroyArgs struct {
	VMID    int     `json:"vmid" min:"1"`
	Confirm bool    `json:"confirm" desc:"must be true: the VM and its disks are gone for good"`
	Wait    float64 `json:"wait,omitempty" desc:"seconds to wait" default:"30" min:"0" max:"max_wait"`
}

func vmTools() []*Tool {
	return []*Tool{
		newTool(Def{Name: "vm_list_templates", Toolset: "vm", Title: "List templates",
			Description: "Clonable templates as TSV: family, variants; with filter: vmid, name, node.",
			Summary:     "Templates: TSV family, variants; with a filter, TSV vmid, name, node",
			Effect:      readOnly("lists the bench's templates")}, listTemplates),
		newTool(Def{Name: "vm_list_my_vms", Toolset: "vm", Title: "List my VMs",
			Description: "Your VMs: a line naming the owner, then TSV vmid, name, node, status.",
			Summary:     "Your VMs: the owner line, then TSV vmid, name, node, status",
			Effect:      readOnly("lists the caller's VMs")}, listMyVMs),
		newTool(Def{Name: "vm_task_wait", Toolset: "vm", Title: "Wait for a task",
			Description: "Wait for a backend task (clone, start, stop, snapshot, ...): done, failed, or still running.",
			Summary:     "Wait for a backend task; done, failed, or still running: call again",
			Effect:      readOnly("waits on a task another call started")}, taskWait),
		newTool(Def{Name: "vm_clone", Toolset: "vm", Title: "Clone a template",
			Description: "Clone a template as <owner>-repro-<name>: answers vmid N <name> on <node>, and a upid while the clone runs. A name that exists is refused with its vmid.",
			Summary:     "Clone as `<owner>-repro-<name>`; a name that exists is refused with its vmid",
			Effect:      additiveOnce("adds a VM; a name that exists is refused")}, clone),
		newTool(Def{Name: "vm_start", Toolset: "vm", Title: "Start a VM",
			Description: "Start a VM.",
			Summary:     "Start a VM",
			Effect:      additiveOnce("starts a VM; a running one stays as it is")}, lifecycle("started", (*hostapi.VM).Start)),
		newTool(Def{Name: "vm_stop", Toolset: "vm", Title: "Stop a VM",
			Description: "Power off a VM: ACPI shutdown, then hard after a grace period.",
			Summary:     "Stop a VM: ACPI, then hard",
			Effect:      destructiveOnce("powers off: the guest's unsaved state is lost")}, lifecycle("stopped", (*hostapi.VM).Stop)),
		newTool(Def{Name: "vm_wait_boot", Toolset: "vm", Title: "Wait for the boot",
			Description: "Wait until the guest agent answers (the VM booted).",
			Summary:     "Wait until the guest agent answers",
			Effect:      readOnly("waits until the guest agent answers")}, waitBoot),
		newTool(Def{Name: "vm_snapshot", Toolset: "vm", Title: "Take a snapshot",
			Description: "Snapshot a VM: disks, and memory when it runs.",
			Summary:     "Snapshot a VM (memory too when it runs)",
			Effect:      additiveOnce("adds a snapshot; a name that exists is refused")}, snapshot("snapshot %s taken", (*hostapi.VM).Snapshot)),
		newTool(Def{Name: "vm_rollback", Toolset: "vm", Title: "Roll back to a snapshot",
			Description: "Roll a VM back to a snapshot and start it.",
			Summary:     "Roll back to a snapshot and start",
			Effect:      destructive("discards everything since the snapshot and restarts the VM")}, snapshot("rolled back to %s", (*hostapi.VM).Rollback)),
		newTool(Def{Name: "vm_destroy", Toolset: "vm", Title: "Destroy a VM",
			Description: "Destroy a VM and its disks, stopping it first.",
			Summary:     "Destroy the VM and its disks",
			Effect:      destructiveOnce("removes the VM and its disks")}, destroy),
	}
}

// withVM checks the VM is the caller's and holds its lock for the call.
func withVM(ctx context.Context, c *Call, vmid int, fn func(v *hostapi.VM) (*mcp.CallToolResult, error)) (*mcp.CallToolResult, error) {
	v, release, err := c.Caller.LockVM(ctx, vmid)
	if err != nil {
		return nil, err
	}
	defer release()
	return fn(v)
}

func listTemplates(ctx context.Context, c *Call, in *listTemplatesArgs) (*mcp.CallToolResult, error) {
	tpls, err := c.Caller.Templates(ctx)
	if err != nil {
		return nil, err
	}
	if len(tpls) == 0 {
		return text("no templates (the local backend: make tiny-template builds one)"), nil
	}
	if in.Filter == "" {
		return text("%s", tsv(families(tpls))), nil
	}
	var rows [][]string
	byName := map[string]int{}
	for _, t := range tpls {
		if !strings.Contains(t.Name, in.Filter) {
			continue
		}
		if i, seen := byName[t.Name]; seen { // one line per name: nodes folded
			rows[i][2] += "," + t.Node
			continue
		}
		byName[t.Name] = len(rows)
		rows = append(rows, []string{strconv.Itoa(t.VMID), t.Name, t.Node})
	}
	if len(rows) == 0 {
		return nil, hostapi.Failf("vm_list_templates without filter lists the families", "no template name contains %q", in.Filter)
	}
	return text("%s", tsv(rows)), nil
}

// families folds templates by the part of their name before the first
// dash-separated field that starts with a digit (a version):
// p11-workstation-11.1-x86-64 -> p11-workstation.
func families(tpls []backends.Template) [][]string {
	variants := map[string][]string{}
	for _, t := range tpls {
		fam := family(t.Name)
		v := strings.TrimPrefix(strings.TrimPrefix(t.Name, fam), "-")
		if v == "" {
			v = t.Name
		}
		if !contains(variants[fam], v) {
			variants[fam] = append(variants[fam], v)
		}
	}
	names := make([]string, 0, len(variants))
	for f := range variants {
		names = append(names, f)
	}
	sort.Strings(names)
	rows := make([][]string, len(names))
	for i, f := range names {
		rows[i] = []string{f, strings.Join(variants[f], ", ")}
	}
	return rows
}

func family(name string) string {
	parts := strings.Split(name, "-")
	for i, p := range parts {
		if i > 0 && p != "" && unicode.IsDigit(rune(p[0])) {
			return strings.Join(parts[:i], "-")
		}
	}
	return name
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func listMyVMs(ctx context.Context, c *Call, in *noArgs) (*mcp.CallToolResult, error) {
	vms, err := c.Caller.MyVMs(ctx)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("owner %s: %d VMs named %s*\n", c.Caller.Owner(), len(vms), c.Caller.Prefix())
	rows := make([][]string, len(vms))
	var notes strings.Builder
	for i, vm := range vms {
		rows[i] = []string{strconv.Itoa(vm.VMID), vm.Name, vm.Node, vm.Status}
		if vm.StatusNote != "" {
			fmt.Fprintf(&notes, "note: vmid %d %s %s\n", vm.VMID, vm.Status, vm.StatusNote)
		}
	}
	return text("%s%s%s", head, tsv(rows), notes.String()), nil
}

// taskLine renders a task after a bounded wait.
func taskLine(r hostapi.TaskResult) string {
	switch {
	case !r.Done:
		return fmt.Sprintf("task still running, upid=%s, call vm_task_wait", r.UPID)
	case r.Failed:
		return "task failed: " + r.Status
	}
	return ""
}

func taskWait(ctx context.Context, c *Call, in *taskWaitArgs) (*mcp.CallToolResult, error) {
	r, err := c.Caller.WaitTask(ctx, in.UPID, secs(in.Timeout))
	if err != nil {
		return nil, err
	}
	switch {
	case !r.Done:
		return text("still running after %.0f s, upid=%s: call vm_task_wait again", r.Elapsed.Seconds(), r.UPID), nil
	case r.Failed:
		return nil, r.Err()
	}
	return text("done: %s", r.Status), nil
}

func clone(ctx context.Context, c *Call, in *cloneArgs) (*mcp.CallToolResult, error) {
	name := in.Name
	if name == "" {
		tpls, err := c.Caller.Templates(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range tpls {
			if t.VMID == in.TemplateVMID {
				name = t.Name
			}
		}
	}
	res, err := c.Caller.Clone(ctx, in.TemplateVMID, name, in.Full, in.Pool, secs(in.Wait))
	if err != nil {
		return nil, err
	}
	if res.Existed {
		return nil, hostapi.Failf(fmt.Sprintf("use vmid %d, or clone under another name", res.VMID),
			"%s already exists as vmid %d on %s: not cloned again", res.Name, res.VMID, res.Node)
	}
	return createdAnswer(res)
}

// createdAnswer renders a new VM: vmid N <name> on <node>, and its task
// when it outlived the wait, or the task's failure.
func createdAnswer(res hostapi.CloneResult) (*mcp.CallToolResult, error) {
	if err := res.Task.Err(); err != nil {
		return nil, err
	}
	out := fmt.Sprintf("vmid %d %s on %s", res.VMID, res.Name, res.Node)
	if line := taskLine(res.Task); line != "" {
		out += "\n" + line
	}
	return text("%s", out), nil
}

// taskAnswer renders a lifecycle task after its wait: ok and what was
// done, the task still running (and its upid), or its failure.
func taskAnswer(vmid int, r hostapi.TaskResult, err error, done string) (*mcp.CallToolResult, error) {
	if err != nil {
		return nil, err
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if line := taskLine(r); line != "" {
		return text("vmid %d: %s", vmid, line), nil
	}
	return text("ok: vmid %d %s", vmid, done), nil
}

// lifecycle makes the handler of a start/stop tool.
func lifecycle(done string, op func(*hostapi.VM, context.Context, time.Duration) (hostapi.TaskResult, error)) func(context.Context, *Call, *waitArgs) (*mcp.CallToolResult, error) {
	return func(ctx context.Context, c *Call, in *waitArgs) (*mcp.CallToolResult, error) {
		return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
			r, err := op(v, ctx, secs(in.Wait))
			return taskAnswer(in.VMID, r, err, done)
		})
	}
}

func snapshot(done string, op func(*hostapi.VM, context.Context, string, time.Duration) (hostapi.TaskResult, error)) func(context.Context, *Call, *snapshotArgs) (*mcp.CallToolResult, error) {
	return func(ctx context.Context, c *Call, in *snapshotArgs) (*mcp.CallToolResult, error) {
		return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
			r, err := op(v, ctx, in.Name, secs(in.Wait))
			return taskAnswer(in.VMID, r, err, fmt.Sprintf(done, in.Name))
		})
	}
}

func waitBoot(ctx context.Context, c *Call, in *waitBootArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		ok, elapsed, err := v.WaitBoot(ctx, secs(in.Timeout))
		if err != nil {
			return nil, err
		}
		if !ok {
			return text("not booted after %.0f s: call vm_wait_boot again", elapsed.Seconds()), nil
		}
		return text("booted: the guest agent answered after %.1f s", elapsed.Seconds()), nil
	})
}

func destroy(ctx context.Context, c *Call, in *destroyArgs) (*mcp.CallToolResult, error) {
	if !in.Confirm {
		return nil, hostapi.Failf("call again with confirm=true if you mean it", "vm_destroy needs confirm=true: the VM and its disks are gone for good")
	}
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		r, err := v.Destroy(ctx, secs(in.Wait))
		return taskAnswer(in.VMID, r, err, v.Info().Name+" destroyed")
	})
}
