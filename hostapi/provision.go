package hostapi

import (
	"context"
	"fmt"
	"time"
)

// Provision is how a fresh machine is made ready for work: cloned (a VM of
// the name already there is taken instead), started, its guest agent
// answering and, when asked, a global IPv4 address on it. A stand's machine
// and `poligon run --template` are both made so.
type Provision struct {
	Clone CloneSpec // the clone; Clone.Wait bounds each backend task (clone, start)
	// AgentWait bounds the wait for the guest agent after the start.
	AgentWait time.Duration
	// AddressWait, when set, waits that long for a global IPv4 address once
	// the agent answers.
	AddressWait time.Duration
	// Cloned hears of the clone as soon as it exists (before its copy is
	// waited for), so the caller can record or remove it; its error stops
	// the provisioning.
	Cloned func(CloneResult) error
	// Booting hears that the clone is copied and the start begins.
	Booting func() error
}

// Provisioned is a machine Provision made ready.
type Provisioned struct {
	CloneResult
	IP     string        // with AddressWait: its global IPv4
	Booted time.Duration // from the start to the agent's first answer
}

// Provision makes a machine ready as p says. Once the clone exists its
// vmid is in the answer, with or without an error, so the caller can remove
// it. Each wait is the caller's (a script caller's waits are its own; any
// other's are cut at max_wait and asked again until p's bound).
func (c *Caller) Provision(ctx context.Context, p Provision) (Provisioned, error) {
	var out Provisioned
	cr, err := c.CloneVM(ctx, p.Clone)
	out.CloneResult = cr // a clone whose copy failed still has a vmid to remove
	if err != nil {
		return out, fmt.Errorf("clone: %w", err)
	}
	if p.Cloned != nil {
		if err := p.Cloned(cr); err != nil {
			return out, err
		}
	}
	if err := c.awaitTask(ctx, cr.Task, p.Clone.Wait); err != nil {
		return out, fmt.Errorf("clone: %w", err)
	}
	if p.Booting != nil {
		if err := p.Booting(); err != nil {
			return out, err
		}
	}
	v, release, err := c.LockVM(ctx, cr.VMID)
	if err != nil {
		return out, err
	}
	defer release()
	if v.Info().Status != "running" {
		r, err := v.Start(ctx, p.Clone.Wait)
		if err == nil {
			err = c.awaitTask(ctx, r, p.Clone.Wait)
		}
		if err != nil {
			return out, fmt.Errorf("start: %w", err)
		}
	}
	if out.Booted, err = v.awaitAgent(ctx, p.AgentWait); err != nil {
		return out, err
	}
	if p.AddressWait > 0 {
		if out.IP, err = v.awaitAddress(ctx, p.AddressWait); err != nil {
			return out, fmt.Errorf("read the address: %w", err)
		}
	}
	return out, nil
}

// awaitTask waits for a task until it ends or total passes, asking again
// where a wait was cut at max_wait.
func (c *Caller) awaitTask(ctx context.Context, r TaskResult, total time.Duration) error {
	deadline := time.Now().Add(total)
	for !r.Done {
		// A wait on an ended context answers "still running" at once.
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Failf("vm_task_wait follows it", "task %s still runs after %s", r.UPID, total)
		}
		var err error
		if r, err = c.waitTask(ctx, r.UPID, left); err != nil {
			return err
		}
	}
	return r.Err()
}

// awaitAgent waits until the guest agent answers, at most total.
func (v *VM) awaitAgent(ctx context.Context, total time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		left := total - time.Since(start)
		ok, _, err := v.WaitBoot(ctx, max(left, 0))
		if err != nil {
			return 0, err
		}
		if ok {
			return time.Since(start), nil
		}
		if err := context.Cause(ctx); ctx.Err() != nil {
			return 0, err
		}
		if time.Since(start) >= total {
			return 0, Failf("check the template boots with its guest agent (ui_screenshot shows the console)",
				"the guest agent did not answer within %s", total)
		}
	}
}

// awaitAddress waits for a global IPv4 address on the guest, at most total.
func (v *VM) awaitAddress(ctx context.Context, total time.Duration) (string, error) {
	deadline := time.Now().Add(total)
	for {
		ip, err := v.IPv4(ctx)
		if err == nil && ip != "" {
			return ip, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = Failf("check the template gets an address by DHCP", "no global IPv4 address after %s", total)
			}
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
