package trace

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Selection is the steps a door asks to export: a VM's, a stand's, an MCP
// session's, a time range's, or where they meet. Times are RFC 3339 or how
// long ago (90m, 2h).
type Selection struct {
	VMID         int
	Stand        string
	Session      string
	Since, Until string
}

// ErrNoSelection: nothing narrows the steps.
var ErrNoSelection = errors.New("nothing selects the steps: name a vmid, a stand, a session or a since")

// Query answers the selection as a query, and a name for it (the export's
// file name and title): vm101-stand-web-since-1204-1015.
func (s Selection) Query(now time.Time) (Query, string, error) {
	q := Query{VMID: s.VMID, Stand: s.Stand, Session: s.Session}
	var parts []string
	if s.VMID != 0 {
		parts = append(parts, fmt.Sprintf("vm%d", s.VMID))
	}
	if s.Stand != "" {
		parts = append(parts, "stand-"+s.Stand)
	}
	if s.Session != "" {
		parts = append(parts, "session")
	}
	var err error
	if q.Since, err = when(s.Since, "since", now); err != nil {
		return q, "", err
	}
	if q.Until, err = when(s.Until, "until", now); err != nil {
		return q, "", err
	}
	if !q.Since.IsZero() {
		parts = append(parts, "since-"+q.Since.UTC().Format("0102-1504"))
	}
	if len(parts) == 0 {
		return q, "", ErrNoSelection
	}
	return q, strings.Join(parts, "-"), nil
}

// when reads an RFC 3339 time or a duration back from now.
func when(v, what string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q is neither an RFC 3339 time (2026-12-04T10:15:00Z) nor a duration (90m)", what, v)
}
