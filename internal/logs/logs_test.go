package logs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestIDs(t *testing.T) {
	ids := NewIDs(time.Unix(0x16aae89, 0)) // the low 24 bits of the boot second
	if a, b := ids.Next(), ids.Next(); a != "6aae89-1" || b != "6aae89-2" {
		t.Fatalf("ids %s, %s", a, b)
	}
}

// Every format carries req: the context's, else "-"; one a line already
// has (vision's model line, a builder's With) is not repeated.
func TestFormatsCarryReq(t *testing.T) {
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, format, "debug")
			if err != nil {
				t.Fatal(err)
			}
			ctx := WithReq(t.Context(), "6aae89-7")
			log.InfoContext(ctx, "in a call", "tool", "vm_exec")
			log.Info("startup", "version", "dev")
			log.With("req", "6aae89-2").InfoContext(ctx, "builder")
			log.InfoContext(ctx, "model", "req", "6aae89-3")
			log.Debug("odd", "a key with spaces", "x", "ctl", "bell\a and \xff", "multi", "line one\nline two")
			want := []string{"6aae89-7", None, "6aae89-2", "6aae89-3", None}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != len(want) {
				t.Fatalf("%d lines:\n%s", len(lines), buf.String())
			}
			for i, line := range lines {
				var kv map[string]string
				switch format {
				case "json":
					var m map[string]any
					if err := json.Unmarshal([]byte(line), &m); err != nil {
						t.Fatalf("not JSON: %v\n%s", err, line)
					}
					kv = map[string]string{}
					for k, v := range m {
						kv[k] = fmt.Sprint(v)
					}
					if n := strings.Count(line, `"req":`); n != 1 {
						t.Errorf("req %d times in %s", n, line)
					}
				case "logfmt":
					kv, err = ParseLogfmt(line) // fails on a repeated key too
					if err != nil {
						t.Fatalf("not logfmt: %v\n%s", err, line)
					}
				case "text":
					if n := strings.Count(line, " req="); n != 1 {
						t.Errorf("req %d times in %s", n, line)
					}
					continue
				}
				if kv["req"] != want[i] {
					t.Errorf("line %d req=%q, want %q: %s", i, kv["req"], want[i], line)
				}
			}
		})
	}
	if _, err := New(&bytes.Buffer{}, "yaml", "info"); err == nil {
		t.Error("an unknown format is accepted")
	}
}

func TestLevel(t *testing.T) {
	var buf bytes.Buffer
	log, _ := New(&buf, "logfmt", "warn")
	log.Info("quiet")
	log.Warn("loud")
	if out := buf.String(); strings.Contains(out, "quiet") || !strings.Contains(out, "loud") {
		t.Fatalf("at warn: %q", out)
	}
}

// payloadErr is an error whose text ends in a payload.
type payloadErr struct{ head, body string }

func (e *payloadErr) Error() string { return e.head + ": " + e.body }
func (e *payloadErr) SafeLen() int  { return len(e.head) }

func TestCut(t *testing.T) {
	inner := &payloadErr{head: "PVE answered 500 to POST /nodes/pve1/qemu/100/agent/exec", body: "token=s3cr3t in the body"}
	err := fmt.Errorf("step 2 failed: %w", inner)
	msg := "error: " + err.Error()
	c := Cut(msg, err)
	if c.Safe != "error: step 2 failed: PVE answered 500 to POST /nodes/pve1/qemu/100/agent/exec" || !c.Payload ||
		c.Chars != len(": token=s3cr3t in the body") {
		t.Fatalf("structured: %+v", c)
	}
	// Reworded on the way up: its head still marks the place.
	c = Cut("error: "+strings.Replace(err.Error(), "s3cr3t", "<redacted>", 1), err)
	if strings.Contains(c.Safe, "token") || !strings.HasSuffix(c.Safe, "/agent/exec") {
		t.Fatalf("reworded: %+v", c)
	}
	// A payload that cannot be found: nothing is logged.
	if c = Cut("something else entirely", err); c.Safe != "" || c.Chars != len("something else entirely") {
		t.Fatalf("lost: %+v", c)
	}
	// Plain text: the opening of guest output.
	c = Cut(`error: login failed: expect failed: exitcode 1, stdout "password=hunter2", stderr ""`, errors.New("x"))
	if c.Safe != "error: login failed: expect failed: exitcode 1" || !c.Payload {
		t.Fatalf("text rule: %+v", c)
	}
	// No payload: whole, or cut at MaxError.
	if c = Cut("error: vmid 7 is not yours", nil); c.Safe != "error: vmid 7 is not yours" || c.Chars != 0 || c.Payload {
		t.Fatalf("clean: %+v", c)
	}
	long := strings.Repeat("é", 1000)
	if c = Cut(long, nil); c.Chars != 1000-MaxError || c.Payload || len([]rune(c.Safe)) != MaxError {
		t.Fatalf("long: %d chars cut", c.Chars)
	}
}

// A line logged below a group keeps working (req inside the group).
func TestGroup(t *testing.T) {
	var buf bytes.Buffer
	log, _ := New(&buf, "json", "info")
	log.WithGroup("g").InfoContext(WithReq(t.Context(), "x-1"), "m", "k", "v")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if g, _ := m["g"].(map[string]any); g["req"] != "x-1" || g["k"] != "v" {
		t.Fatalf("%s", buf.String())
	}
}
