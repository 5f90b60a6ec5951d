package poligon

import "github.com/poligon/poligon/hostapi/calls"

// Power is the VM's power and snapshots.
type Power struct{ vm *VM }

// Power answers the VM's power verbs.
func (vm *VM) Power() Power { return Power{vm} }

// PowerOpts bound how long a power verb waits for the backend.
type PowerOpts struct {
	Wait float64 // seconds; default 600
}

// Start starts the VM.
func (p Power) Start(opts ...PowerOpts) error {
	return p.vm.Call(calls.Start, calls.PowerArgs{Wait: firstOf(opts).Wait}, nil)
}

// Stop powers the VM off (ACPI, then hard).
func (p Power) Stop(opts ...PowerOpts) error {
	return p.vm.Call(calls.Stop, calls.PowerArgs{Wait: firstOf(opts).Wait}, nil)
}

// Snapshot takes a snapshot named name.
func (p Power) Snapshot(name string, opts ...PowerOpts) error {
	return p.vm.Call(calls.Snapshot, calls.SnapshotArgs{Name: name, Wait: firstOf(opts).Wait}, nil)
}

// Rollback rolls back to the snapshot name and starts the VM.
func (p Power) Rollback(name string, opts ...PowerOpts) error {
	return p.vm.Call(calls.Rollback, calls.SnapshotArgs{Name: name, Wait: firstOf(opts).Wait}, nil)
}
