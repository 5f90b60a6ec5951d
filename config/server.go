package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/internal/owner"
)

// Token maps an HTTP bearer token to an owner (local benches). Give the
// token's SHA-256 (hex) rather than the token itself where you can.
type Token struct {
	Owner  string `toml:"owner"`
	Token  Secret `toml:"token"`
	SHA256 string `toml:"sha256"`
}

// Server configures `poligon serve`.
// Toolsets are the tool families a server can offer.
var Toolsets = []string{"vm", "ui", "iso", "stand", "bench", "trace", "dataset", "scripts"}

type Server struct {
	Bind         string   `toml:"bind"`          // default 127.0.0.1:8811
	AllowedHosts []string `toml:"allowed_hosts"` // Host values accepted besides loopback; "*" any
	// Toolsets are the tool families offered: vm, ui, iso, stand, bench,
	// trace, dataset, scripts; empty: every family the benches can serve.
	Toolsets []string `toml:"toolsets"`
}

// Limits bound what calls may ask for.
type Limits struct {
	MaxWait        Duration `toml:"max_wait"`         // cap of every wait; default 50s
	BusyWait       Duration `toml:"busy_wait"`        // wait for a busy VM; default 30s
	ScriptTimeout  Duration `toml:"script_timeout"`   // default 10m
	ScriptMemoryMB int      `toml:"script_memory_mb"` // default 256
	ShutdownGrace  Duration `toml:"shutdown_grace"`   // calls in flight may finish; default 90s
}

// serverDefaults fills the server and limits settings.
func (c *Config) serverDefaults() {
	if c.Server.Bind == "" {
		c.Server.Bind = "127.0.0.1:8811"
	}
	l := &c.Limits
	def := func(d *Duration, v time.Duration) {
		if d.Duration == 0 {
			d.Duration = v
		}
	}
	def(&l.MaxWait, 50*time.Second)
	def(&l.BusyWait, 30*time.Second)
	def(&l.ScriptTimeout, 10*time.Minute)
	def(&l.ShutdownGrace, 90*time.Second)
	if l.ScriptMemoryMB == 0 {
		l.ScriptMemoryMB = 256
	}
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// checkServer checks the owner, the tokens, the server and the limits.
func (c *Config) checkServer() []error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	for i, t := range c.Tokens {
		where := fmt.Sprintf("token[%d]", i)
		if !owner.Valid(t.Owner) {
			bad("%s: owner must be lowercase letters and digits (got %q)", where, t.Owner)
		}
		switch {
		case t.Token == "" && t.SHA256 == "":
			bad("%s: set token or sha256", where)
		case t.Token != "" && t.SHA256 != "":
			bad("%s: set token or sha256, not both", where)
		case t.SHA256 != "" && !hexSHA256.MatchString(t.SHA256):
			bad("%s: sha256 must be 64 lowercase hex digits", where)
		case t.Token != "" && len(t.Token) < 16:
			bad("%s: token is shorter than 16 characters", where)
		}
	}
	if owner.Sanitize(c.Owner) == "" {
		bad("owner %q has no letters or digits: set owner in the config", c.Owner)
	}
	if _, _, err := net.SplitHostPort(c.Server.Bind); err != nil {
		bad("server.bind %q: %v", c.Server.Bind, err)
	}
	for _, t := range c.Server.Toolsets {
		if !slices.Contains(Toolsets, t) {
			bad("server.toolsets: unknown toolset %q: use %s", t, strings.Join(Toolsets, ", "))
		}
	}
	if c.Limits.MaxWait.Duration <= 0 || c.Limits.MaxWait.Duration > 10*time.Minute {
		bad("limits.max_wait %s: between 1s and 10m", c.Limits.MaxWait.Duration)
	}
	if c.Limits.ScriptMemoryMB < 16 {
		bad("limits.script_memory_mb %d: at least 16", c.Limits.ScriptMemoryMB)
	}
	return problems
}

// OwnerOfToken answers the owner an HTTP bearer token maps to. Tokens are
// compared by their SHA-256 in constant time.
func (c *Config) OwnerOfToken(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	for _, t := range c.Tokens {
		want := t.SHA256
		if t.Token != "" {
			s := sha256.Sum256([]byte(t.Token.Reveal()))
			want = hex.EncodeToString(s[:])
		}
		w, err := hex.DecodeString(want)
		if err == nil && subtle.ConstantTimeCompare(w, sum[:]) == 1 {
			return t.Owner, true
		}
	}
	return "", false
}

// Port answers the port of server.bind.
func (c *Config) Port() int {
	_, p, _ := net.SplitHostPort(c.Server.Bind)
	n, _ := strconv.Atoi(p)
	return n
}
