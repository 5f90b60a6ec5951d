// Package backends declares the capabilities a machine backend can serve.
//
// A backend (the local QEMU driver, Proxmox VE, a PiKVM, a BMC) implements the
// subset of these interfaces it can serve; callers discover them by type
// assertion through the As* helpers, which turn a missing capability into one
// clear error naming the backend and the capability. Backends know nothing of
// MCP, scripts or owners: policy lives above them, in hostapi.
//
// Every method takes a context and returns promptly when it is cancelled.
// Long operations (clone, start, stop, snapshot, ...) return a Task: the
// operation runs on the backend's side and TaskStatus reports on it, so a
// caller can wait a bounded time and come back later with the task id.
package backends

import (
	"context"
	"errors"
	"fmt"
	"image"
	"net"
	"time"
)

// Backend is the one thing every backend serves: its kind and a name for
// messages ("local", "pve https://pve1:8006").
type Backend interface {
	Kind() string
}

// VM is one machine as the tools see it.
type VM struct {
	VMID   int
	Name   string
	Node   string
	Status string // "running", "stopped", "paused", "unknown"
	// StatusNote says why Status is not live, where it is not (QEMU's
	// monitor held by another client: the state last seen); empty otherwise.
	StatusNote string
	Template   bool
	Pool       string // empty where the backend has no pools
}

// Template is a machine that can be cloned.
type Template struct {
	VMID int
	Name string
	Node string
}

// Task is a long operation running on the backend. ID has the PVE UPID form
// (UPID:node:pid:pstart:starttime:type:id:user:) on every backend, so callers
// parse and show one format.
type Task struct {
	ID   string
	VMID int
}

// TaskStatus is what a backend knows about a task.
type TaskStatus struct {
	Running    bool
	ExitStatus string // "OK" when finished well; the error text when it failed
	Type       string // "qmclone", "qmstart", ...
	VMID       int
}

// Failed reports whether a finished task ended badly.
func (s TaskStatus) Failed() bool { return !s.Running && s.ExitStatus != "OK" }

// CloneRequest asks for a new VM from a template.
type CloneRequest struct {
	Template int
	Name     string // full name, already owner-prefixed by the caller
	Full     bool   // full copy instead of a linked clone
	Pool     string
	// Network names a stand's network: VMs cloned with the same Network
	// reach each other by IP (the local backend joins them to one switch).
	// "" keeps the template's network; backends whose VMs already share one
	// (a PVE bridge) ignore it.
	Network string
}

// Lifecycle lists, clones, starts, stops and destroys VMs.
type Lifecycle interface {
	Backend
	// Templates lists the clonable templates.
	Templates(ctx context.Context) ([]Template, error)
	// VMs lists every VM the backend knows (templates excluded). It may lag
	// mutations on backends that cache; VM does not.
	VMs(ctx context.Context) ([]VM, error)
	// VM reads one VM afresh; an unknown vmid is an error wrapping ErrNotFound.
	VM(ctx context.Context, vmid int) (VM, error)
	// Clone creates a VM from a template and answers its vmid at once; the
	// copy itself may still run in the returned task.
	Clone(ctx context.Context, req CloneRequest) (int, Task, error)
	// Start boots a stopped VM.
	Start(ctx context.Context, vmid int) (Task, error)
	// Stop powers a VM off: ACPI first, then hard after the backend's grace
	// period. Stopping a stopped VM succeeds.
	Stop(ctx context.Context, vmid int) (Task, error)
	// Destroy stops a VM if needed and removes it with every disk.
	Destroy(ctx context.Context, vmid int) (Task, error)
}

// Identity is served by backends whose credentials name a user (a Proxmox
// API token): the owner name derived from the credential, and the pools the
// caller may create and touch VMs in. Backends without it (the local one)
// take the owner from poligon's own configuration.
type Identity interface {
	Identity(ctx context.Context) (owner string, pools []string, err error)
}

// Tasks reports on long operations.
type Tasks interface {
	TaskStatus(ctx context.Context, id string) (TaskStatus, error)
	// WaitTask blocks until the task ends or ctx does and answers its latest
	// status (still Running when ctx ended first); the error is for an
	// unknown task or an unreachable backend, never for ctx ending.
	WaitTask(ctx context.Context, id string) (TaskStatus, error)
}

// Snapshots saves and restores the whole state of a VM.
type Snapshots interface {
	Snapshot(ctx context.Context, vmid int, name string) (Task, error)
	// Rollback restores a snapshot and leaves the VM running.
	Rollback(ctx context.Context, vmid int, name string) (Task, error)
	ListSnapshots(ctx context.Context, vmid int) ([]string, error)
}

// ISO is an installer image the backend can boot from.
type ISO struct {
	VolID string
	Size  int64
}

// ISORequest asks for a VM that boots from an installer ISO.
type ISORequest struct {
	Name    string
	ISO     string // a VolID from ISOs
	DiskGB  int
	Disks   int
	MemMB   int
	Cores   int
	UEFI    bool
	Pool    string
	Storage string
}

// Media creates installer VMs and changes their disks and CD.
type Media interface {
	ISOs(ctx context.Context, storage string) ([]ISO, error)
	CreateFromISO(ctx context.Context, req ISORequest) (int, Task, error)
	Eject(ctx context.Context, vmid int) error
	ResizeDisk(ctx context.Context, vmid int, disk string, sizeGB int) error
	// AddDisks adds count disks of sizeGB each and answers their names.
	AddDisks(ctx context.Context, vmid int, sizeGB, count int) ([]string, error)
}

// ExecRequest starts a program in the guest. Path is run with Args, not
// through a shell: callers that want a shell pass "/bin/sh", "-c", cmd.
type ExecRequest struct {
	Path  string
	Args  []string
	Env   []string
	Input []byte
}

// ExecStatus is the state of a program started with ExecStart.
type ExecStatus struct {
	Exited       bool
	ExitCode     int
	Signal       int
	Stdout       []byte
	Stderr       []byte
	OutTruncated bool
	ErrTruncated bool
}

// Interface is a guest network interface with its addresses.
type Interface struct {
	Name      string
	MAC       string
	Addresses []net.IPNet
}

// Guest talks to the agent inside a running VM.
type Guest interface {
	// GuestPing answers nil once the agent responds; an agent that does not
	// answer is an error wrapping ErrAgentNotRunning.
	GuestPing(ctx context.Context, vmid int) error
	ExecStart(ctx context.Context, vmid int, req ExecRequest) (pid int, err error)
	ExecStatus(ctx context.Context, vmid int, pid int) (ExecStatus, error)
	// ReadFile reads at most max bytes from offset and the file's size.
	ReadFile(ctx context.Context, vmid int, path string, offset, max int64) (data []byte, size int64, err error)
	WriteFile(ctx context.Context, vmid int, path string, data []byte) error
	Interfaces(ctx context.Context, vmid int) ([]Interface, error)
}

// Console opens the screen, keyboard and mouse of a VM. The Screen it answers
// is shared and stays open across calls; callers never close it.
type Console interface {
	Console(ctx context.Context, vmid int) (Screen, error)
}

// Button is a mouse button.
type Button int

const (
	Left Button = iota
	Middle
	Right
)

// Screen is a live console: the current frame plus keyboard and mouse.
// Implementations pace input so that no event is lost.
type Screen interface {
	// Frame answers a copy of the current frame and when it last changed.
	Frame(ctx context.Context) (*image.RGBA, time.Time, error)
	// Key presses a key or combination by qemu sendkey name ("ret",
	// "ctrl-alt-f2").
	Key(ctx context.Context, combo string) error
	// Type types text character by character.
	Type(ctx context.Context, text string) error
	Move(ctx context.Context, x, y int) error
	// Click moves, presses for 300 ms and releases, count times.
	Click(ctx context.Context, x, y int, b Button, count int) error
	Drag(ctx context.Context, x1, y1, x2, y2 int) error
	// Wheel scrolls at x, y: negative up, positive down.
	Wheel(ctx context.Context, x, y, steps int) error
}

// ChangeClock is a Screen that tells when its frame last changed without
// copying it (a VNC client's live framebuffer), for watchers that poll.
type ChangeClock interface {
	Changed() time.Time
}

// FreshScreen is a Screen whose Frame can lag the screen (a VNC client's
// frame is the last update its server chose to send) and that can ask for
// the screen as it is. A Screen without it captures anew in Frame.
type FreshScreen interface {
	// FreshFrame answers a frame no older than the call.
	FreshFrame(ctx context.Context) (*image.RGBA, time.Time, error)
}

// LossyScreen is a Screen whose frames come lossily compressed (a PiKVM's
// JPEG snapshots): a change re-encodes the compression blocks it touches,
// so pixels around it that did not move differ too.
type LossyScreen interface {
	// FrameBlock is the frames' compression block: a JPEG's MCU, 8x8
	// pixels, or 16x16 with 4:2:0 chroma.
	FrameBlock() image.Point
}

// EncodedScreen is a Screen whose frames arrive encoded (a PiKVM's JPEG
// snapshots): an answer that shows a frame whole can pass those bytes on
// rather than encode the pixels again.
type EncodedScreen interface {
	// EncodedFrame is Frame with the bytes its pixels were decoded from
	// and their MIME type ("image/jpeg").
	EncodedFrame(ctx context.Context) (img *image.RGBA, data []byte, mime string, changed time.Time, err error)
}

// Physical benches: a machine behind a PiKVM or a BMC is one machine, not a
// hypervisor; it serves Console (vmid is ignored: there is one screen),
// Power and VirtualMedia as far as its controller can.

// Power actions a physical bench may be asked for.
const (
	PowerOn      = "on"       // press power if off
	PowerOff     = "off"      // graceful: ACPI / a short press
	PowerOffHard = "off-hard" // hold power / ForceOff
	PowerReset   = "reset"    // hard reset
	PowerCycle   = "cycle"    // off, then on
)

// Power drives a physical machine's power.
type Power interface {
	// PowerState answers "on", "off" or "unknown".
	PowerState(ctx context.Context) (string, error)
	// Power performs one of the Power* actions; a controller busy with
	// another action answers an error wrapping ErrBusy.
	Power(ctx context.Context, action string) error
}

// MediaImage is an image a bench's virtual drive can present.
type MediaImage struct {
	Name string
	Size int64
}

// MediaState is what the bench's virtual drive presents now.
type MediaState struct {
	Connected bool
	Image     string // "" when none is selected
	Mode      string // "cd" | "flash"
}

// MediaMount asks a bench to present an image: one already on the device
// (Image, a name from MediaList) or one fetched first from URL.
type MediaMount struct {
	Image    string
	URL      string
	Mode     string // "cd" (default) | "flash"
	BootOnce bool   // boot from it at the next start (where the controller can)
}

// VirtualMedia presents disk images to a physical machine.
type VirtualMedia interface {
	MediaList(ctx context.Context) ([]MediaImage, MediaState, error)
	MediaMount(ctx context.Context, m MediaMount) error
	// MediaEject disconnects the drive; ejecting an empty drive succeeds.
	MediaEject(ctx context.Context) error
}

// Screendumper takes a screenshot on the hypervisor side (QMP screendump):
// slower than a live frame, but independent of the console connection.
type Screendumper interface {
	Screendump(ctx context.Context, vmid int) (image.Image, error)
}

// Errors every backend wraps, so callers can tell them apart with errors.Is.
var (
	ErrNotFound        = errors.New("not found")
	ErrAgentNotRunning = errors.New("guest agent is not running")
	// ErrBusy: the controller is busy with another operation (kvmd's 409).
	ErrBusy = errors.New("busy")
	// ErrNoSignal: a physical console shows nothing (no video signal).
	ErrNoSignal = errors.New("no video signal")
	// ErrAgentDisabled: the VM has no guest agent channel at all (Proxmox's
	// agent option off); unlike ErrAgentNotRunning, waiting will not help.
	ErrAgentDisabled = errors.New("the VM has no guest agent configured")
	ErrNotRunning    = errors.New("vm is not running")
	ErrExists        = errors.New("already exists")
	ErrUnsupported   = errors.New("not supported")
)

// Hinted is an error that says what to do about it: a backend knows its own
// failures best (a token without a privilege, a node that did not answer),
// so it attaches the hint where it makes the error, and hostapi shows it.
type Hinted interface {
	error
	Hint() string
}

// WithHint wraps err with a hint; errors.Is and errors.As still see err.
func WithHint(err error, hint string) error {
	if err == nil || hint == "" {
		return err
	}
	return &hinted{err: err, hint: hint}
}

type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() }
func (h *hinted) Unwrap() error { return h.err }
func (h *hinted) Hint() string  { return h.hint }

// Failure is an error told in its own words: Text is what the user reads
// (the operation named, secrets scrubbed from the cause's own text), Err
// the cause that errors.Is and errors.As still see, Advice its hint. The
// remote backends' transport failures (network, TLS, an answer that does
// not decode) are Failures.
type Failure struct {
	Text   string
	Advice string
	Err    error
}

func (e *Failure) Error() string { return e.Text }
func (e *Failure) Unwrap() error { return e.Err }
func (e *Failure) Hint() string  { return e.Advice }

// HintOf answers the first hint in err's chain, or "".
func HintOf(err error) string {
	var h Hinted
	if errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}

// CapabilityError says a backend cannot serve a capability.
type CapabilityError struct {
	Backend    string
	Capability string
}

func (e *CapabilityError) Error() string {
	return fmt.Sprintf("the %s backend has no %s capability", e.Backend, e.Capability)
}

func (e *CapabilityError) Unwrap() error { return ErrUnsupported }

// As answers b as capability T, or a CapabilityError naming both.
func As[T any](b Backend, capability string) (T, error) {
	if c, ok := b.(T); ok {
		return c, nil
	}
	var zero T
	return zero, &CapabilityError{Backend: b.Kind(), Capability: capability}
}
