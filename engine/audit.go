package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/internal/audit"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/redact"
)

// callRecord is a tool call's audit record, the error behind a tool error
// (where its payload starts, for the log line), and what its trace step is
// made of.
type callRecord struct {
	audit.Record
	err   error
	trace callTrace
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
		switch {
		case slices.Contains(t.Redact, name) || name != "key" && redact.IsSecretName(name):
			args[name] = redact.Placeholder(v)
		case name == "plan":
			args[name] = stand.Redacted(planBytes(v))
		case name == "command":
			if cmd, ok := v.(string); ok {
				args[name] = redact.Command(cmd)
			}
		}
	}
	return args
}

// planBytes is a plan argument as written: a JSON object, or a string
// holding one.
func planBytes(v any) []byte {
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	b, _ := json.Marshal(v)
	return b
}

// auditError keeps the part of an error text that says what failed and
// drops the payload (logs.Cut: one rule for the audit log and the log).
func auditError(msg string) string { return logs.Cut(msg, nil).Text() }

// reqIDs are the correlation ids of this process's tool calls.
var reqIDs = logs.NewIDs(time.Now())

// logCall writes a call's one tool line: req, the client's JSON-RPC id,
// tool, bench, vmid, ms and, when it failed, the error up to its payload
// (error_chars: how much was cut). log_payload adds the whole text at
// debug, on a line of its own with the same req.
func (s *Server) logCall(ctx context.Context, rec *callRecord, rpc string, shown logs.Cutting, res *mcp.CallToolResult, err error) {
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
