package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"
)

// TraceStep is one call on a machine, as the trace keeps it.
type TraceStep struct {
	ID      int64
	At      time.Time
	Took    time.Duration
	Owner   string // whose machine the call was on (the caller's owner)
	Caller  string // who called: an owner or a token id, never a secret
	Bench   string
	VMID    int
	VM      string // its name, when known
	Stand   string // the stand whose build made it, if any
	Session string // the MCP session it came in, if any
	Req     string
	Source  string          // mcp, script, stand, run, web
	Call    string          // the tool or host call
	Args    json.RawMessage // redacted
	Outcome string          // ok, error, failed
	Error   string
	Before  string // the frame (digest) before the call, "" for none
	After   string // the frame after it
	Text    string // what OCR read, when the call read the screen
	// Elements is the element list a vision model answered, when it did.
	Elements string
}

// size is what a step counts against the trace's bound.
func (s *TraceStep) size() int64 {
	return int64(128 + len(s.Owner) + len(s.Caller) + len(s.Bench) + len(s.VM) + len(s.Stand) + len(s.Session) +
		len(s.Req) + len(s.Source) + len(s.Call) + len(s.Args) + len(s.Outcome) + len(s.Error) + len(s.Before) +
		len(s.After) + len(s.Text) + len(s.Elements))
}

// TraceFrame is a frame a step names, kept as a file beside the store.
type TraceFrame struct {
	Digest string
	Bytes  int64
}

// AddTrace records steps and the frames they bring (frames already known
// are not counted twice), in one transaction; it answers the steps' ids.
func (s *Store) AddTrace(ctx context.Context, steps []TraceStep, frames []TraceFrame, now time.Time) ([]int64, error) {
	ids := make([]int64, 0, len(steps))
	err := s.write(ctx, func(tx *sql.Tx) error {
		for _, f := range frames {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO trace_frame (digest, bytes, at_ns) VALUES (?, ?, ?)`,
				f.Digest, f.Bytes, now.UnixNano()); err != nil {
				return err
			}
		}
		for _, st := range steps {
			args := string(st.Args)
			if args == "" {
				args = "{}"
			}
			r, err := tx.ExecContext(ctx, `INSERT INTO trace_step (`+traceInsert+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				st.At.UnixNano(), int64(st.Took), st.Owner, st.Caller, st.Bench, st.VMID, st.VM, st.Stand, st.Session, st.Req,
				st.Source, st.Call, args, st.Outcome, st.Error, st.Before, st.After, st.Text, st.Elements, st.size())
			if err != nil {
				return err
			}
			id, err := r.LastInsertId()
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

const traceInsert = `at_ns, took_ns, owner, caller, bench, vmid, vm, stand, session, req, source, call, args, outcome, error, before, after, text, elements, bytes`
const traceColumns = `id, ` + traceInsert

// TraceQuery selects steps; zero fields do not narrow. Steps come oldest
// first.
type TraceQuery struct {
	Owner string
	// OthersSince, with Owner, adds other owners' steps from this time on
	// (a physical bench's lease holder reads the bench's steps of their
	// lease, not those of the holders before).
	OthersSince time.Time
	Bench       string
	VMID        int
	Stand       string
	Session     string
	Since       time.Time
	Until       time.Time
	Frame       string // only steps showing this frame, before or after
	After       int64  // only steps with a greater id (a live view's next page)
	Limit       int    // default 1000
}

// TraceSteps answers the steps q selects.
func (s *Store) TraceSteps(ctx context.Context, q TraceQuery) ([]TraceStep, error) {
	var where []string
	var args []any
	add := func(cond string, v any) { where = append(where, cond); args = append(args, v) }
	switch {
	case q.Owner != "" && !q.OthersSince.IsZero():
		where = append(where, "(owner = ? OR at_ns >= ?)")
		args = append(args, q.Owner, q.OthersSince.UnixNano())
	case q.Owner != "":
		add("owner = ?", q.Owner)
	}
	if q.Bench != "" {
		add("bench = ?", q.Bench)
	}
	if q.VMID != 0 {
		add("vmid = ?", q.VMID)
	}
	if q.Stand != "" {
		add("stand = ?", q.Stand)
	}
	if q.Session != "" {
		add("session = ?", q.Session)
	}
	if !q.Since.IsZero() {
		add("at_ns >= ?", q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		add("at_ns < ?", q.Until.UnixNano())
	}
	if q.Frame != "" {
		where = append(where, "(before = ? OR after = ?)")
		args = append(args, q.Frame, q.Frame)
	}
	if q.After > 0 {
		add("id > ?", q.After)
	}
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	query := `SELECT ` + traceColumns + ` FROM trace_step`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY id LIMIT ?`
	rows, err := s.db.QueryContext(ctx, query, append(args, q.Limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TraceStep
	for rows.Next() {
		var st TraceStep
		var at, took int64
		var argsText string
		var size int64
		if err := rows.Scan(&st.ID, &at, &took, &st.Owner, &st.Caller, &st.Bench, &st.VMID, &st.VM, &st.Stand, &st.Session,
			&st.Req, &st.Source, &st.Call, &argsText, &st.Outcome, &st.Error, &st.Before, &st.After, &st.Text, &st.Elements, &size); err != nil {
			return nil, err
		}
		st.At, st.Took, st.Args = fromNanos(at), time.Duration(took), json.RawMessage(argsText)
		out = append(out, st)
	}
	return out, rows.Err()
}

// TraceUsage is what the trace holds.
type TraceUsage struct {
	Steps       int64
	StepBytes   int64
	Frames      int64
	FrameBytes  int64
	Oldest      time.Time
	OldestFrame time.Time
}

// TraceUsage answers what the trace holds, for its bound and /metrics.
func (s *Store) TraceUsage(ctx context.Context) (TraceUsage, error) {
	var u TraceUsage
	var oldest, oldestFrame sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(bytes), 0), min(at_ns) FROM trace_step`).Scan(&u.Steps, &u.StepBytes, &oldest); err != nil {
		return u, err
	}
	if err := s.db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(bytes), 0), min(at_ns) FROM trace_frame`).Scan(&u.Frames, &u.FrameBytes, &oldestFrame); err != nil {
		return u, err
	}
	if oldest.Valid {
		u.Oldest = fromNanos(oldest.Int64)
	}
	if oldestFrame.Valid {
		u.OldestFrame = fromNanos(oldestFrame.Int64)
	}
	return u, nil
}

// PruneTrace drops the steps older than cutoff, then the oldest steps
// until steps and frames together fit in maxBytes (0: no size bound), then
// the frames no step names any more. It answers how many steps went and
// the frames to remove from disk.
func (s *Store) PruneTrace(ctx context.Context, cutoff time.Time, maxBytes int64) (dropped int64, gone []string, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, `DELETE FROM trace_step WHERE at_ns < ?`, cutoff.UnixNano())
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		dropped += n
		for maxBytes > 0 {
			var total int64
			if err := tx.QueryRowContext(ctx, `SELECT (SELECT coalesce(sum(bytes), 0) FROM trace_step) + (SELECT coalesce(sum(bytes), 0) FROM trace_frame)`).Scan(&total); err != nil {
				return err
			}
			if total <= maxBytes {
				break
			}
			// Oldest first, a tenth of the steps at a time (at least one),
			// then the frames they leave unnamed are counted again.
			r, err := tx.ExecContext(ctx, `DELETE FROM trace_step WHERE id IN (SELECT id FROM trace_step ORDER BY id LIMIT max(1, (SELECT count(*) FROM trace_step) / 10))`)
			if err != nil {
				return err
			}
			n, _ := r.RowsAffected()
			dropped += n
			if _, err := unnamedFrames(ctx, tx, &gone); err != nil {
				return err
			}
			if n == 0 {
				break // only frames are left, and none unnamed
			}
		}
		_, err = unnamedFrames(ctx, tx, &gone)
		return err
	})
	return dropped, gone, err
}

// unnamedFrames deletes the frames no step names, appending their digests.
func unnamedFrames(ctx context.Context, tx *sql.Tx, gone *[]string) (int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT digest FROM trace_frame WHERE NOT EXISTS (SELECT 1 FROM trace_step WHERE before = digest) AND NOT EXISTS (SELECT 1 FROM trace_step WHERE after = digest)`)
	if err != nil {
		return 0, err
	}
	var ds []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			rows.Close()
			return 0, err
		}
		ds = append(ds, d)
	}
	rows.Close()
	for _, d := range ds {
		if _, err := tx.ExecContext(ctx, `DELETE FROM trace_frame WHERE digest = ?`, d); err != nil {
			return 0, err
		}
	}
	*gone = append(*gone, ds...)
	return len(ds), rows.Err()
}
