package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/internal/testvm"
)

// A server loads libtesseract on its first screen read, not at start: after
// startup (its eyes report included) and a tool call that reads no screen,
// the library is not in the process; the first ui_read loads it and reads.
func TestServeLoadsTesseractOnFirstRead(t *testing.T) {
	cmd := exec.Command(binaryPath, "serve", "--stdio")
	cmd.Env = env(t, testvm.DataDir(t))
	var stderr testvm.SyncBuffer
	cmd.Stderr = &stderr
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "lazy-ocr-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v\nthe server's log:\n%s", name, err, stderr.String())
		}
		text := ""
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if res.IsError {
			t.Fatalf("%s %v: %s", name, args, text)
		}
		return text
	}
	call("vm_list_my_vms", nil)
	if mapped(t, cmd.Process.Pid, "libtesseract") {
		t.Fatalf("libtesseract is loaded after startup and vm_list_my_vms, before any screen was read")
	}

	out := call("vm_clone", map[string]any{"template_vmid": 9000, "name": "lazy", "full": false})
	m := regexp.MustCompile(`vmid[ =:]+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("vm_clone answered %q", out)
	}
	vmid, _ := strconv.Atoi(m[1])
	defer call("vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50})
	call("vm_start", map[string]any{"vmid": vmid})
	for i := 0; !strings.HasPrefix(call("vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 50}), "booted"); i++ {
		if i == 3 {
			t.Fatalf("vmid %d not booted after 4 calls of vm_wait_boot", vmid)
		}
	}
	call("vm_exec", map[string]any{"vmid": vmid, "command": "clear >/dev/tty1; echo LAZY READER >/dev/tty1"})
	if mapped(t, cmd.Process.Pid, "libtesseract") {
		t.Fatalf("libtesseract is loaded before the first ui_read")
	}
	if out := call("ui_read", map[string]any{"vmid": vmid}); !strings.Contains(out, "LAZY READER") {
		t.Fatalf("the first ui_read does not read the line written on tty1:\n%s", out)
	}
	if !mapped(t, cmd.Process.Pid, "libtesseract") {
		t.Errorf("libtesseract is not in the process after a ui_read that read the screen")
	}
}

// mapped reports whether a file whose name contains name is mapped into
// the process.
func mapped(t *testing.T, pid int, name string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), name)
}
