// Package audit is the audit log: one JSON line per call a door served (an
// MCP tool call, a browser's input), appended to a file or stderr. What a
// record holds is the door's to decide; this package only never loses a
// line to a concurrent writer and never prints a secret it was not given.
package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Record is one line of the audit log: one call.
type Record struct {
	Time      string         `json:"time"`
	Req       string         `json:"req,omitempty"`   // the call's correlation id, as on its log lines
	Caller    string         `json:"caller"`          // who called: the owner, or a PVE token id (never its secret)
	Owner     string         `json:"owner,omitempty"` // whose VMs the call could touch, as the bench decided
	Transport string         `json:"transport"`       // stdio, http
	Bench     string         `json:"bench,omitempty"`
	Tool      string         `json:"tool"`
	VMID      int            `json:"vmid,omitempty"`
	Args      map[string]any `json:"args,omitempty"` // redacted by the door
	Outcome   string         `json:"outcome"`        // ok, error (refused or failed for the model), failed (server)
	Error     string         `json:"error,omitempty"`
	Ms        float64        `json:"ms"`
}

// Log appends records as JSON lines. A nil *Log writes nothing.
type Log struct {
	mu sync.Mutex
	w  io.Writer
	f  *os.File
}

// Open opens the audit log at path: "" is none (a nil Log), "-" stderr.
func Open(path string) (*Log, error) {
	switch path {
	case "":
		return nil, nil
	case "-":
		return &Log{w: os.Stderr}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &Log{w: f, f: f}, nil
}

// Write appends r, stamped with the time now.
func (l *Log) Write(r Record) {
	if l == nil {
		return
	}
	r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	line, err := json.Marshal(r)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(append(line, '\n'))
}

// Close closes the file.
func (l *Log) Close() {
	if l != nil && l.f != nil {
		l.f.Close()
	}
}
