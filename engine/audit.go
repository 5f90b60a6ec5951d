package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/internal/redact"
)

// auditRecord is one line of the audit log: one tool call.
type auditRecord struct {
	Time      string         `json:"time"`
	Caller    string         `json:"caller"`          // who called: the owner, or a PVE token id (never its secret)
	Owner     string         `json:"owner,omitempty"` // whose VMs the call could touch, as the bench decided
	Transport string         `json:"transport"`
	Bench     string         `json:"bench,omitempty"`
	Tool      string         `json:"tool"`
	VMID      int            `json:"vmid,omitempty"`
	Args      map[string]any `json:"args,omitempty"`
	Outcome   string         `json:"outcome"` // ok, error (refused or failed for the model), failed (server)
	Error     string         `json:"error,omitempty"`
	Ms        float64        `json:"ms"`
}

// auditLog appends JSON lines to a file (or stderr with "-"). A nil
// *auditLog writes nothing.
type auditLog struct {
	mu sync.Mutex
	w  io.Writer
	f  *os.File
}

func openAudit(path string) (*auditLog, error) {
	switch path {
	case "":
		return nil, nil
	case "-":
		return &auditLog{w: os.Stderr}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &auditLog{w: f, f: f}, nil
}

func (a *auditLog) write(r auditRecord) {
	if a == nil {
		return
	}
	r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	line, err := json.Marshal(r)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.w.Write(append(line, '\n'))
}

func (a *auditLog) close() {
	if a != nil && a.f != nil {
		a.f.Close()
	}
}

// redact answers the arguments for the audit log: typed text, file contents
// and anything named like a secret replaced by its size. "key" alone (a key
// name for ui_key) is not a secret.
func redactArgs(t *Tool, raw json.RawMessage) map[string]any {
	var args map[string]any
	if json.Unmarshal(raw, &args) != nil {
		return nil
	}
	for name, v := range args {
		if name == "params" {
			if params, ok := v.(map[string]any); ok {
				for k, pv := range params {
					if redact.IsSecretName(k) {
						params[k] = redact.Placeholder(pv)
					}
				}
			}
			continue
		}
		if slices.Contains(t.Redact, name) || name != "key" && redact.IsSecretName(name) {
			args[name] = redact.Placeholder(v)
		}
	}
	return args
}

// auditError keeps the part of an error that says what failed and drops the
// payload: guest output or a server's body can carry a password, and
// cutting at N characters does not help when it comes first.
func auditError(msg string) string {
	for _, payload := range []string{", stdout \"", ": stdout \"", " stderr \""} {
		if i := strings.Index(msg, payload); i >= 0 {
			msg = msg[:i] + " (output left out)"
		}
	}
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:300]) + "..."
	}
	return msg
}
