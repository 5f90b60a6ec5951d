// Package logs is how poligon writes log lines an operator can follow:
// one format for the whole process (logfmt, JSON or slog's text), the
// correlation id of the tool call on every line the call causes (req=),
// and the one rule for where an error's text stops being safe to log.
package logs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

type reqKey struct{}

// WithReq tags ctx with a tool call's correlation id: every line logged
// with ctx (or a context made from it) carries it as req.
func WithReq(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, reqKey{}, id)
}

// Req answers ctx's correlation id, "" when it has none.
func Req(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	id, _ := ctx.Value(reqKey{}).(string)
	return id
}

// None is the req of a line logged outside any tool call.
const None = "-"

// IDs makes the correlation ids of one process: the boot second (6 hex
// digits) and a counter, "6aae89-1". They are unique per run, short enough
// to grep, and neither a secret nor a capability.
type IDs struct {
	prefix string
	n      atomic.Uint64
}

// NewIDs makes the ids of a process that started at boot.
func NewIDs(boot time.Time) *IDs {
	return &IDs{prefix: fmt.Sprintf("%06x", uint32(boot.Unix())&0xffffff)}
}

// Next answers a new id.
func (g *IDs) Next() string { return fmt.Sprintf("%s-%d", g.prefix, g.n.Add(1)) }

// Formats are the values of log_format.
var Formats = []string{"logfmt", "json", "text"}

// New makes the process's logger: format logfmt (default), json or text,
// at level (debug, info, warn, error; default info), every line with req.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if level != "" {
		if err := l.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
		}
	}
	h, err := NewHandler(w, format, &slog.HandlerOptions{Level: l})
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

// NewHandler makes a handler of format whose lines carry req.
func NewHandler(w io.Writer, format string, opts *slog.HandlerOptions) (slog.Handler, error) {
	var h slog.Handler
	switch format {
	case "", "logfmt":
		o := *opts
		o.ReplaceAttr = logfmtAttr
		h = slog.NewTextHandler(w, &o)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: use logfmt, json or text", format)
	}
	return WithReqs(h), nil
}

// logfmtAttr keeps slog's text lines valid logfmt: keys of letters,
// digits and ._-/ only (slog would quote any other), and string values
// whose quoting any logfmt parser reads (no control characters but
// newline and tab, no invalid UTF-8, which slog escapes Go's way).
func logfmtAttr(_ []string, a slog.Attr) slog.Attr {
	a.Key = strings.Map(func(r rune) rune {
		if r > ' ' && r < 0x7f && r != '=' && r != '"' {
			return r
		}
		return '_'
	}, a.Key)
	if a.Key == "" {
		a.Key = "_"
	}
	if a.Value.Kind() == slog.KindString {
		if s := a.Value.String(); !printable(s) {
			a.Value = slog.StringValue(strings.Map(func(r rune) rune {
				if r == '\n' || r == '\t' || !unicode.IsControl(r) && r != utf8.RuneError {
					return r
				}
				return '?'
			}, strings.ToValidUTF8(s, "?")))
		}
	}
	return a
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

// reqs adds req to every line that has none: the one of the context it
// was logged with, else "-" (startup, the console reaper).
type reqs struct {
	next   slog.Handler
	hasReq bool // a With("req", ...) above: the line has one
}

// WithReqs wraps a handler so that its lines carry req.
func WithReqs(h slog.Handler) slog.Handler {
	if r, ok := h.(reqs); ok {
		return r
	}
	return reqs{next: h}
}

func (h reqs) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h reqs) Handle(ctx context.Context, r slog.Record) error {
	if !h.hasReq {
		has := false
		r.Attrs(func(a slog.Attr) bool {
			has = a.Key == "req"
			return !has
		})
		if !has {
			id := Req(ctx)
			if id == "" {
				id = None
			}
			r = r.Clone()
			r.AddAttrs(slog.String("req", id))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h reqs) WithAttrs(as []slog.Attr) slog.Handler {
	has := h.hasReq
	for _, a := range as {
		has = has || a.Key == "req"
	}
	return reqs{next: h.next.WithAttrs(as), hasReq: has}
}

// WithGroup: a line below a group carries req inside it (poligon opens
// no groups; the SDK's handlers do not either).
func (h reqs) WithGroup(name string) slog.Handler {
	return reqs{next: h.next.WithGroup(name), hasReq: h.hasReq}
}
