package engine

import (
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

// The policy every tool's annotations state, so a client that approves
// tools by their hints approves what they really do:
//   - read-only: changes no machine (no VM, no bench, not the server's disk);
//   - additive: changes something but loses nothing;
//   - destructive: can lose data or state (a file's content, a VM's unsaved
//     state, work open in a desktop);
//   - idempotent: a second identical call changes nothing more;
//   - open world: what it makes the guest do can reach beyond the bench.
type toolClass int

const (
	readOnlyClass toolClass = iota
	additiveClass
	destructiveClass
)

var classNames = map[toolClass]string{readOnlyClass: "read-only", additiveClass: "additive", destructiveClass: "destructive"}

type toolPolicy struct {
	class      toolClass
	idempotent bool
	openWorld  bool
	why        string
}

// policies lists every tool the server registers, built-in and shipped
// scripts; a new tool fails the test until it is classified here.
var policies = map[string]toolPolicy{
	"vm_list_templates": {readOnlyClass, true, false, "lists the bench's templates"},
	"vm_list_my_vms":    {readOnlyClass, true, false, "lists the caller's VMs"},
	"vm_task_wait":      {readOnlyClass, true, false, "waits on a task another call started"},
	"vm_wait_boot":      {readOnlyClass, true, false, "waits until the guest agent answers"},
	"iso_list":          {readOnlyClass, true, false, "lists the storage's ISOs"},
	"vm_file_read":      {readOnlyClass, true, false, "reads a file through the guest agent"},
	"ui_wait_for":       {readOnlyClass, true, false, "polls the screen or the window list; installs nothing (the hint says how)"},
	"ui_read":           {readOnlyClass, true, false, "reads the screen's text by OCR, on this server"},
	"bench_status":      {readOnlyClass, true, false, "lists the benches, their leases and power states"},
	"storage_list":      {readOnlyClass, true, false, "lists the configured storages"},
	"bench_lease":       {additiveClass, false, false, "takes or extends a lease: nothing is lost"},
	"bench_release":     {additiveClass, true, false, "ends the caller's own lease"},
	"bench_power":       {destructiveClass, false, false, "powers a physical machine off or resets it"},
	"bench_media":       {destructiveClass, false, false, "swaps the installer media under a machine that may be reading it"},

	"vm_clone":       {additiveClass, true, false, "adds a VM; a name that exists is refused"},
	"vm_create_iso":  {additiveClass, true, false, "adds a VM with empty disks; a name that exists is refused"},
	"vm_start":       {additiveClass, true, false, "starts a VM; a running one stays as it is"},
	"vm_snapshot":    {additiveClass, true, false, "adds a snapshot; a name that exists is refused"},
	"vm_disk_resize": {additiveClass, true, false, "grows a disk to a size; disks only grow"},
	"vm_disk_add":    {additiveClass, false, false, "adds disks; every call adds more"},

	"ui_screenshot":    {destructiveClass, true, false, "path= saves a PNG in the evidence directory, replacing a file of that name"},
	"ui_see":           {destructiveClass, true, true, "path= replaces a PNG as ui_screenshot does; the screen goes to the vision model's endpoint"},
	"ui_click_label":   {destructiveClass, false, true, "input to whatever is under the label: it can close or confirm anything"},
	"vm_file_write":    {destructiveClass, true, false, "replaces the file: its old content is lost"},
	"vm_stop":          {destructiveClass, true, false, "powers off: the guest's unsaved state is lost"},
	"vm_destroy":       {destructiveClass, true, false, "removes the VM and its disks"},
	"vm_eject":         {destructiveClass, true, false, "empties the CD drive under an installer that may still read it"},
	"vm_rollback":      {destructiveClass, false, false, "discards everything since the snapshot and restarts the VM"},
	"vm_exec":          {destructiveClass, false, true, "any shell command, as root"},
	"vm_run":           {destructiveClass, false, true, "any long command, as root; restart=true runs it again"},
	"vm_exec_gui":      {destructiveClass, false, true, "any program, as the desktop user"},
	"ui_click":         {destructiveClass, false, true, "input to whatever has the pointer: it can close or confirm anything"},
	"ui_drag":          {destructiveClass, false, true, "input to whatever has the pointer"},
	"ui_type":          {destructiveClass, false, true, "input to whatever has the focus (a shell runs what it gets)"},
	"ui_key":           {destructiveClass, false, true, "input to whatever has the focus (ctrl-alt-delete reboots)"},
	"vm_login":         {destructiveClass, false, true, "a script: sets a password, types into the greeter"},
	"vm_gnome_login":   {destructiveClass, false, true, "a script: vm_login with session=gnome"},
	"vm_lightdm_login": {destructiveClass, false, true, "a script: vm_login through lightdm"},
	"vm_install":       {destructiveClass, false, true, "a script: apt-get install from the guest's mirrors, as root"},

	"stand_plan":    {readOnlyClass, true, true, "changes nothing; the goal and the template list go to the planner model's endpoint"},
	"stand_status":  {readOnlyClass, true, false, "reads the stand's record"},
	"stand_apply":   {destructiveClass, false, true, "clones VMs and runs the plan's commands in them as root; a resume runs a cut step again"},
	"stand_destroy": {destructiveClass, true, false, "removes every VM of the stand and its disks"},
}

// TestAnnotationsStateThePolicy checks every registered tool against its
// row in policies: the hints say its class, idempotence and reach, and it
// has a title for people.
func TestAnnotationsStateThePolicy(t *testing.T) {
	s, _ := newServer(t, fullSurface(testConfig(t, testvm.ShortTempDir(t))))
	seen := map[string]bool{}
	for _, name := range s.ToolNames() {
		seen[name] = true
		tool, _ := s.Tool(name)
		p, ok := policies[name]
		if !ok {
			t.Errorf("%s: not in policies: classify it (read-only, additive or destructive; idempotent; open world) with a reason", name)
			continue
		}
		a := tool.Annotations
		destructiveHint := a.DestructiveHint == nil || *a.DestructiveHint // the spec's default is true
		openHint := a.OpenWorldHint == nil || *a.OpenWorldHint
		got := toolPolicy{class: additiveClass, idempotent: a.IdempotentHint, openWorld: openHint}
		switch {
		case a.ReadOnlyHint:
			got.class = readOnlyClass
			if a.DestructiveHint == nil || *a.DestructiveHint || !a.IdempotentHint {
				t.Errorf("%s: read-only, but the hints say destructive=%v idempotent=%v", name, destructiveHint, a.IdempotentHint)
			}
		case destructiveHint:
			got.class = destructiveClass
		}
		if got.class != p.class || got.idempotent != p.idempotent || got.openWorld != p.openWorld {
			t.Errorf("%s (%s): annotated %s idempotent=%v open-world=%v, the policy says %s idempotent=%v open-world=%v",
				name, p.why, classNames[got.class], got.idempotent, got.openWorld, classNames[p.class], p.idempotent, p.openWorld)
		}
		if a.Title == "" || tool.def().Title != a.Title {
			t.Errorf("%s: title %q, listed as %q: every tool needs one", name, a.Title, tool.def().Title)
		}
	}
	for name := range policies {
		if !seen[name] {
			t.Errorf("%s: in policies but not registered", name)
		}
	}
}
