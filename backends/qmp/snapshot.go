package qmp

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Internal snapshots (QEMU 6.0+) run as jobs: the command only starts the job;
// query-jobs reports it "concluded", with an "error" when it failed, and
// job-dismiss removes it. Measured on QEMU 7.2:
//   - snapshot-save and snapshot-load stop the VM while they work and leave it
//     as they found it: running stays running, paused stays paused.
//   - a failed snapshot-load (unknown tag) leaves the VM stopped in run state
//     "restore-vm"; Cont resumes it.
//   - snapshot-save with a tag that exists fails ("already exists"); delete
//     it first.
//   - snapshot-delete of a tag that does not exist succeeds.
//   - vmstate must name a node that can hold VM state (the qcow2 node, not
//     its file node) and devices every writable disk node to snapshot.

var jobCounter atomic.Uint64

// Job is one entry of query-jobs.
type Job struct {
	ID              string `json:"id"`
	Type            string `json:"type"`
	Status          string `json:"status"` // "created", "running", ..., "concluded"
	CurrentProgress int64  `json:"current-progress"`
	TotalProgress   int64  `json:"total-progress"`
	Error           string `json:"error"`
}

// JobError is the error text of a job that concluded badly.
type JobError struct {
	ID   string
	Type string
	Desc string
}

func (e *JobError) Error() string { return e.Desc }

// QueryJobs lists QEMU's block jobs and snapshot jobs.
func (c *Client) QueryJobs(ctx context.Context) ([]Job, error) {
	var jobs []Job
	err := c.Execute(ctx, "query-jobs", nil, &jobs)
	return jobs, err
}

// SnapshotSave saves the VM state into node vmstateNode and takes an internal
// snapshot called tag of every node in devices (qcow2 node names).
func (c *Client) SnapshotSave(ctx context.Context, tag, vmstateNode string, devices []string) error {
	return c.runSnapshotJob(ctx, "snapshot-save", tag, map[string]any{
		"tag": tag, "vmstate": vmstateNode, "devices": nonNil(devices),
	})
}

// SnapshotLoad restores a snapshot taken with SnapshotSave.
func (c *Client) SnapshotLoad(ctx context.Context, tag, vmstateNode string, devices []string) error {
	return c.runSnapshotJob(ctx, "snapshot-load", tag, map[string]any{
		"tag": tag, "vmstate": vmstateNode, "devices": nonNil(devices),
	})
}

// SnapshotDelete removes the snapshot called tag from every node in devices.
func (c *Client) SnapshotDelete(ctx context.Context, tag string, devices []string) error {
	return c.runSnapshotJob(ctx, "snapshot-delete", tag, map[string]any{
		"tag": tag, "devices": nonNil(devices),
	})
}

// runSnapshotJob starts a job under a unique id, waits until it concludes
// (woken by its JOB_STATUS_CHANGE events, checking at least every second),
// dismisses it and reports its error. If ctx ends first the job keeps running
// in QEMU; QueryJobs finds it by the id in the error.
func (c *Client) runSnapshotJob(ctx context.Context, command, tag string, args map[string]any) error {
	id := fmt.Sprintf("poligon-%s-%d-%d", command, time.Now().UnixNano(), jobCounter.Add(1))
	args["job-id"] = id
	if err := c.Execute(ctx, command, args, nil); err != nil {
		return fmt.Errorf("%w (tag %q)", err, tag)
	}
	for {
		seen := c.eventsSeen()
		jobs, err := c.QueryJobs(ctx)
		if err != nil {
			return fmt.Errorf("qmp %s %q: watching job %s: %w", command, tag, id, err)
		}
		job, found := findJob(jobs, id)
		if !found {
			return fmt.Errorf("qmp %s %q: job %s vanished before it concluded", command, tag, id)
		}
		if job.Status == "concluded" {
			if err := c.Execute(ctx, "job-dismiss", map[string]string{"id": id}, nil); err != nil {
				return fmt.Errorf("qmp %s %q: %w", command, tag, err)
			}
			if job.Error != "" {
				return fmt.Errorf("qmp %s %q: %w", command, tag, &JobError{ID: id, Type: job.Type, Desc: job.Error})
			}
			return nil
		}
		c.waitForEvents(ctx, seen, time.Second)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("qmp %s %q: job %s still %s: %w", command, tag, id, job.Status, err)
		}
	}
}

func findJob(jobs []Job, id string) (Job, bool) {
	for _, j := range jobs {
		if j.ID == id {
			return j, true
		}
	}
	return Job{}, false
}

// nonNil makes a nil list an empty JSON array, so QEMU answers with its own
// message ("At least one device is required") rather than a type error.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
