package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/redact"
)

// auditRecord is one line of the audit log: one tool call.
type auditRecord struct {
	Time      string         `json:"time"`
	Req       string         `json:"req,omitempty"`   // the call's correlation id, as on its log lines
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

	err error // the error behind a tool error: where its payload starts
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

// auditError keeps the part of an error text that says what failed and
// drops the payload (logs.Cut: one rule for the audit log and the log).
func auditError(msg string) string { return auditText(logs.Cut(msg, nil)) }

// auditText is a cut error as the audit log shows it.
func auditText(c logs.Cutting) string {
	switch {
	case c.Payload:
		return c.Safe + " (output left out)"
	case c.Chars > 0:
		return c.Safe + "..."
	}
	return c.Safe
}

// reqIDs are the correlation ids of this process's tool calls.
var reqIDs = logs.NewIDs(time.Now())

// logCall writes a call's one tool line: req, the client's JSON-RPC id,
// tool, bench, vmid, ms and, when it failed, the error up to its payload
// (error_chars: how much was cut). log_payload adds the whole text at
// debug, on a line of its own with the same req.
func (s *Server) logCall(ctx context.Context, rec *auditRecord, rpc string, shown logs.Cutting, res *mcp.CallToolResult, err error) {
	if rpc == "" {
		rpc = logs.None
	}
	attrs := []any{"req", rec.Req, "rpc", rpc, "tool", rec.Tool, "bench", rec.Bench}
	if rec.VMID != 0 {
		attrs = append(attrs, "vmid", rec.VMID)
	}
	attrs = append(attrs, "ms", int64(rec.Ms), "outcome", rec.Outcome)
	if s.log.Enabled(ctx, slog.LevelDebug) {
		attrs = append(attrs, "caller", rec.Caller) // an owner or a PVE token id, never a secret
	}
	level := slog.LevelInfo
	if rec.Outcome != "ok" {
		attrs = append(attrs, "error", shown.Safe)
		if shown.Chars > 0 {
			attrs = append(attrs, "error_chars", shown.Chars)
		}
	}
	if rec.Outcome == "failed" {
		level = slog.LevelWarn // the server failed, not the call
	}
	s.log.Log(ctx, level, "tool", attrs...)
	if s.cfg.LogPayload && shown.Chars > 0 {
		full := ""
		if err != nil {
			full = err.Error()
		} else {
			full = allText(res)
		}
		s.log.DebugContext(ctx, "tool error payload", "req", rec.Req, "tool", rec.Tool, "error", full)
	}
}

// allText is every text of a result, one after the other.
func allText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// mcpIDKey is the SDK's context key of the JSON-RPC id, once found.
var mcpIDKey atomic.Value

// rpcID answers the client's JSON-RPC id of the request ctx serves ("" if
// none is found). go-sdk v1.8 keeps it in the handler's context under an
// unexported key and offers no accessor (its streamable.go, idContextKey,
// says one may come), so the key's type is found once by walking the
// context chain; then it is an ordinary ctx.Value. TestToolLineJoinsItsTrail
// fails if an SDK update moves it.
func rpcID(ctx context.Context) string {
	key := mcpIDKey.Load()
	if key == nil {
		k, ok := findIDKey(ctx)
		if !ok {
			return ""
		}
		mcpIDKey.Store(k)
		key = k
	}
	id, ok := ctx.Value(key).(jsonrpc.ID)
	if !ok || !id.IsValid() {
		return ""
	}
	return fmt.Sprint(id.Raw())
}

func findIDKey(ctx context.Context) (any, bool) {
	pkg := reflect.TypeFor[mcp.Server]().PkgPath()
	v := reflect.ValueOf(ctx)
	for range 256 {
		for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return nil, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return nil, false
		}
		if k := v.FieldByName("key"); k.IsValid() && k.Kind() == reflect.Interface && !k.IsNil() {
			if t := k.Elem().Type(); t.PkgPath() == pkg && t.Name() == "idContextKey" {
				return reflect.Zero(t).Interface(), true
			}
		}
		next := v.FieldByName("Context") // valueCtx, cancelCtx, timerCtx
		if !next.IsValid() {
			next = v.FieldByName("c") // withoutCancelCtx
		}
		if !next.IsValid() {
			return nil, false
		}
		v = next
	}
	return nil, false
}
