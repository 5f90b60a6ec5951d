package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/internal/testvm"
)

var vmidLine = regexp.MustCompile(`^vmid (\d+) (\S+) on (\S+)`)

// cloneTiny clones the tiny template through vm_clone and answers its vmid.
func cloneTiny(t *testing.T, cs *mcp.ClientSession, name string) string {
	t.Helper()
	out := mustOK(t, cs, "vm_clone", map[string]any{"template_vmid": 9000, "name": name, "full": false})
	m := vmidLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("vm_clone answered %q", out)
	}
	return m[1]
}

// bootVM starts a VM and waits until its agent answers, calling
// vm_wait_boot again while it says so.
func bootVM(t *testing.T, cs *mcp.ClientSession, vmid int) {
	t.Helper()
	mustOK(t, cs, "vm_start", map[string]any{"vmid": vmid})
	for i := 0; ; i++ {
		out := mustOK(t, cs, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 50})
		if strings.HasPrefix(out, "booted") {
			return
		}
		if i == 3 {
			t.Fatalf("not booted after 4 calls: %s", out)
		}
	}
}

// runUntilEnd calls vm_run for cmd (the first call with restart) until it
// answers something else than "running for".
func runUntilEnd(t *testing.T, cs *mcp.ClientSession, vmid int, cmd string, restart bool) string {
	t.Helper()
	for deadline := time.Now().Add(backendtest.HangGuard); ; {
		out := mustOK(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": cmd, "wait": 10, "restart": restart})
		if !strings.HasPrefix(out, "running for") {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("vm_run of %q still running after %s: %q", cmd, backendtest.HangGuard, out)
		}
		restart = false
	}
}

// litPixels counts the pixels of r that are not dark: text on the console.
func litPixels(img image.Image, r image.Rectangle) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if c, _, _, _ := color.GrayModel.Convert(img.At(x, y)).RGBA(); c>>8 > 0x60 {
				n++
			}
		}
	}
	return n
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestToolsOnTiny drives every built-in tool against one tiny VM, through
// an in-memory MCP client, as an agent would.
func TestToolsOnTiny(t *testing.T) {
	cfg := testConfig(t, testvm.DataDir(t))
	cfg.Limits.BusyWait.Duration = time.Second
	s, cs := newServer(t, cfg)
	ctx := context.Background()

	out := mustOK(t, cs, "vm_list_templates", nil)
	if !strings.Contains(out, "tiny\ttiny") {
		t.Fatalf("vm_list_templates = %q", out)
	}
	if out := mustOK(t, cs, "vm_list_templates", map[string]any{"filter": "tin"}); out != "9000\ttiny\tlocal\n" {
		t.Fatalf("vm_list_templates filter = %q", out)
	}
	mustRefuse(t, cs, "vm_list_templates", map[string]any{"filter": "nosuch"}, "no template")

	id := cloneTiny(t, cs, "flow")
	vmid := atoi(t, id)
	t.Cleanup(func() { call(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50}) })
	mustRefuse(t, cs, "vm_clone", map[string]any{"template_vmid": 9000, "name": "flow"}, "already exists as vmid "+id)
	if out := mustOK(t, cs, "vm_list_my_vms", nil); !strings.Contains(out, id+"\ttester-repro-flow\tlocal\tstopped") {
		t.Fatalf("vm_list_my_vms = %q", out)
	}
	mustRefuse(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "true"}, "is not running")
	bootVM(t, cs, vmid)

	t.Run("exec", func(t *testing.T) {
		out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "echo hi; echo err >&2; exit 3"})
		if out != "exit 3\nhi\n--- stderr\nerr\n" {
			t.Fatalf("vm_exec = %q", out)
		}
		out = mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "printf 'привет' | wc -c; umask"})
		if !strings.HasPrefix(out, "exit 0\n12\n") || !strings.Contains(out, "0022") {
			t.Fatalf("non-ASCII command / umask = %q", out)
		}
	})

	t.Run("files", func(t *testing.T) {
		content := strings.Repeat("0123456789", 3000) // 30000 bytes
		mustOK(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": "/tmp/f.txt", "content_base64": base64.StdEncoding.EncodeToString([]byte(content))})
		out := mustOK(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": "/tmp/f.txt"})
		if !strings.HasSuffix(out, "… truncated at 16384 of 30000 bytes, continue with offset=16384") || !strings.HasPrefix(out, content[:16384]) {
			t.Fatalf("vm_file_read window ends %q", out[len(out)-80:])
		}
		out = mustOK(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": "/tmp/f.txt", "offset": 29990})
		if out != content[29990:] {
			t.Fatalf("vm_file_read tail = %q", out)
		}
		var buf bytes.Buffer
		img := image.NewRGBA(image.Rect(0, 0, 4, 4))
		img.Set(1, 1, color.RGBA{255, 0, 0, 255})
		png.Encode(&buf, img)
		mustOK(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": "/tmp/p.png", "content_base64": base64.StdEncoding.EncodeToString(buf.Bytes())})
		_, res := call(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": "/tmp/p.png"})
		if len(res.Content) != 2 || res.Content[1].(*mcp.ImageContent).MIMEType != "image/png" || !bytes.Equal(res.Content[1].(*mcp.ImageContent).Data, buf.Bytes()) {
			t.Fatalf("a PNG did not come back as the image: %+v", res.Content)
		}
		mustRefuse(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": "/nonexistent"}, "/nonexistent")
		mustRefuse(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": "/tmp/x", "content_base64": "!!"}, "not valid base64")
	})

	t.Run("run detached", func(t *testing.T) {
		// The command runs until its gate file exists: the first answer is
		// "running" however slow the machine is.
		cmd := "echo start >> /tmp/runs; while [ ! -e /tmp/run-gate ]; do sleep 0.1; done; echo finished-run"
		out := mustOK(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": cmd, "wait": 1})
		if !strings.HasPrefix(out, "running for") {
			t.Fatalf("vm_run first call = %q", out)
		}
		mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "touch /tmp/run-gate"})
		if out = runUntilEnd(t, cs, vmid, cmd, false); !strings.HasPrefix(out, "done exit 0") || !strings.Contains(out, "finished-run") {
			t.Fatalf("vm_run after its gate opened = %q", out)
		}
		if out := mustOK(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": cmd, "wait": 1}); !strings.HasPrefix(out, "done exit 0") {
			t.Fatalf("vm_run of a finished run = %q", out)
		}
		if out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "wc -l < /tmp/runs"}); out != "exit 0\n1\n" {
			t.Fatalf("a finished run was repeated: %q", out)
		}
		runUntilEnd(t, cs, vmid, cmd, true)
		if out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "wc -l < /tmp/runs"}); out != "exit 0\n2\n" {
			t.Fatalf("restart=true did not run it again: %q", out)
		}
		if out = runUntilEnd(t, cs, vmid, "exit 7", false); !strings.HasPrefix(out, "failed exit 7") {
			t.Fatalf("vm_run of a failing command = %q", out)
		}
	})

	// OCR on the text console (VGA text mode, 9x16 cells): what is printed
	// there is read, and a reverse-video row (black on grey) is selected.
	t.Run("read", func(t *testing.T) {
		mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": `clear >/dev/tty1; printf 'poligon reads the console\n\033[7m Highlighted entry \033[0m\n' >/dev/tty1`})
		mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 20})
		out := mustOK(t, cs, "ui_read", map[string]any{"vmid": vmid})
		at, sel := readRows(t, out)
		p, ok := at["poligon reads the console"]
		// clear homes the cursor: the first row of 9x16 cells.
		if !ok || !p.In(image.Rect(0, 0, 9*25, 16)) || !sel["Highlighted entry"] {
			t.Fatalf("ui_read of the text console:\n%s", out)
		}
		lc := mustOK(t, cs, "ui_click_label", map[string]any{"vmid": vmid, "label": "Highlighted entry"})
		if !strings.Contains(lc, "(source: ocr)") {
			t.Fatalf("ui_click_label = %q", lc)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		out, res := call(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
		if res.IsError || !regexp.MustCompile(`^\d+x\d+\ntiming: fresh frame in [0-9.]+ s\nframe: [0-9a-f]+$`).MatchString(out) || len(res.Content) != 2 {
			t.Fatalf("ui_screenshot = %q (%d parts)", out, len(res.Content))
		}
		full, _, _ := strings.Cut(out, "\n")
		out, res = call(t, cs, "ui_screenshot", map[string]any{"vmid": vmid, "scale": 0.5, "path": "shots/a.png"})
		if res.IsError || !strings.Contains(out, "(scale 0.5 of "+full+")") || !strings.Contains(out, "saved shots/a.png") {
			t.Fatalf("ui_screenshot scale+path = %q", out)
		}
		saved, err := os.ReadFile(filepath.Join(cfg.EvidenceDir, "shots", "a.png"))
		if err != nil {
			t.Fatal(err)
		}
		cfgImg, err := png.DecodeConfig(bytes.NewReader(saved))
		if err != nil || full != strconv.Itoa(cfgImg.Width)+"x"+strconv.Itoa(cfgImg.Height) {
			t.Fatalf("saved PNG is %dx%d (%v), want full size %s", cfgImg.Width, cfgImg.Height, err, full)
		}
		mustRefuse(t, cs, "ui_screenshot", map[string]any{"vmid": vmid, "path": "../escape.png"}, "leaves the evidence directory")
		mustRefuse(t, cs, "ui_screenshot", map[string]any{"vmid": vmid, "path": "/tmp/escape.png"}, "outside the evidence directory")
		os.Symlink(t.TempDir(), filepath.Join(cfg.EvidenceDir, "link"))
		mustRefuse(t, cs, "ui_screenshot", map[string]any{"vmid": vmid, "path": "link/x.png"}, "symlink")
	})

	// A screenshot taken right after a change in the guest shows it (issue
	// 18): QEMU's VNC server sends updates on a timer that backs off while
	// the screen is idle, so the answer must come from a frame asked for.
	// Two screens alternate on the idle console: a row of '#' at the top,
	// or the top row empty (the cursor parked on row 12 in both).
	t.Run("fresh frame after a guest change", func(t *testing.T) {
		hashes := `"$(printf '%080d' 0 | tr 0 '#')"`
		stale, prev := 0, ""
		for i := 0; i < 20; i++ {
			mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 20}) // idle
			top := i%2 == 0
			cmd := fmt.Sprintf(`printf '\033[2J\033[12;1Hempty top %d' >/dev/tty1`, i)
			if top {
				cmd = fmt.Sprintf(`printf '\033[2J\033[1;1H%%s\033[12;1Hhashes %d' %s >/dev/tty1`, i, hashes)
			}
			mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": cmd})
			// The stale-frame guard sees the change too: a click aimed from
			// the last screenshot at the top row is refused.
			if prev != "" {
				mustRefuse(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": 360, "y": 8, "frame": prev}, "the screen changed near")
			}
			out, res := call(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
			if m := frameName.FindStringSubmatch(out); m != nil {
				prev = m[1]
			}
			if !regexp.MustCompile(`(?m)^timing: fresh frame in [0-9.]+ s$`).MatchString(out) {
				t.Errorf("ui_screenshot %d has no timing line for its frame: %q", i, out)
			}
			lit := litPixels(decodePNG(t, res), image.Rect(0, 0, 720, 16))
			if top && lit < 800 || !top && lit > 50 {
				stale++
				t.Logf("screenshot %d (top row of '#': %v) has %d lit pixels in the top row: the screen before the change", i, top, lit)
			}
		}
		if stale > 0 {
			t.Fatalf("%d of 20 screenshots taken right after a change showed the screen from before it", stale)
		}
	})

	t.Run("type and key", func(t *testing.T) {
		mustOK(t, cs, "ui_type", map[string]any{"vmid": vmid, "text": "echo typed-$((2+3)) > /tmp/t"})
		out, res := call(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "ret", "screenshot": true, "settle_ms": 5000})
		if res.IsError || !strings.Contains(out, "timing: ") || len(res.Content) != 3 {
			t.Fatalf("ui_key with screenshot = %q (%d parts)", out, len(res.Content))
		}
		deadline := time.Now().Add(backendtest.HangGuard)
		for {
			if out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "cat /tmp/t"}); out == "exit 0\ntyped-5\n" {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("typed command did not run: %q", out)
			}
			time.Sleep(300 * time.Millisecond)
		}
		mustRefuse(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "entr"}, "hint: key names are qemu sendkey names")
		mustRefuse(t, cs, "ui_type", map[string]any{"vmid": vmid, "text": strings.Repeat("a", 5000)}, "at most 4096")
	})

	t.Run("mouse and waits", func(t *testing.T) {
		mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": 10, "y": 10})
		mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": 10, "y": 10, "count": 2, "button": "right"})
		mustOK(t, cs, "ui_drag", map[string]any{"vmid": vmid, "x1": 10, "y1": 10, "x2": 100, "y2": 50})
		mustRefuse(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": 5000, "y": 10}, "outside the")
		if out := mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 20}); !strings.HasPrefix(out, "screen settled after") {
			t.Fatalf("ui_wait_for = %q", out)
		}
		mustRefuse(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "window": "xterm", "timeout": 1}, "no desktop session")
	})

	// Every call on the VM is a trace step; trace_export writes them with
	// their frames, and what ui_type typed appears nowhere in the file.
	t.Run("trace", func(t *testing.T) {
		const typed = "pw-not-in-the-trace-4711"
		mustOK(t, cs, "ui_type", map[string]any{"vmid": vmid, "text": typed})
		mustOK(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "ctrl-u"})
		mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": 20, "y": 20})
		mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "true"})
		mustOK(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
		var page string
		eventually(t, "the last calls in the trace", func() bool {
			out := mustOK(t, cs, "trace_export", map[string]any{"vmid": vmid})
			m := regexp.MustCompile(`saved (\S+) under`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("trace_export = %q", out)
			}
			raw, err := os.ReadFile(filepath.Join(cfg.EvidenceDir, m[1]))
			if err != nil {
				t.Fatal(err)
			}
			page = string(raw)
			return strings.Contains(page, "ctrl-u") && strings.Contains(page, "ui_screenshot")
		})
		for _, want := range []string{"ui_type", "ui_key", "ui_click", "vm_exec", "data:image/png;base64,", `alt="the screen after step`} {
			if !strings.Contains(page, want) {
				t.Errorf("the trace lacks %q", want)
			}
		}
		if strings.Contains(page, typed) {
			t.Error("the typed text is in the trace")
		}
		mustRefuse(t, cs, "trace_export", map[string]any{}, "nothing selects")
		mustRefuse(t, cs, "trace_export", map[string]any{"vmid": 99999}, "no steps of yours")
	})

	// QEMU serves one QMP client at a time. While the user's own tool holds
	// the monitor, the console tools (which need none) work, a status read
	// answers the state last seen and says so, and a snapshot (which needs
	// the monitor) fails naming the cause. Two servers (two poligon
	// processes on one state directory) then take turns typing one command.
	t.Run("a foreign QMP client and a second server", func(t *testing.T) {
		be := backendOf(t, s, "")
		release := holdMonitor(t, be.(*qemu.Driver).MonitorSocket(vmid))
		defer release()
		mustOK(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "ctrl-u"})
		mustOK(t, cs, "ui_type", map[string]any{"vmid": vmid, "text": "echo held"})
		mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": 10, "y": 10})
		mustOK(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
		if out := mustOK(t, cs, "ui_read", map[string]any{"vmid": vmid}); !strings.Contains(out, "echo held") {
			t.Fatalf("ui_read while the monitor is held:\n%s", out)
		}
		out := mustOK(t, cs, "vm_list_my_vms", nil)
		if !strings.Contains(out, id+"\ttester-repro-flow\tlocal\trunning\n") || !strings.Contains(out, "note: vmid "+id+" running as last seen") || !strings.Contains(out, "the VM's QMP monitor does not answer (another client holds it)") {
			t.Fatalf("vm_list_my_vms while the monitor is held = %q", out)
		}
		if out, _ := call(t, cs, "vm_snapshot", map[string]any{"vmid": vmid, "name": "held", "wait": 50}); !strings.Contains(out, "QEMU's QMP socket did not answer: another client holds it") {
			t.Fatalf("vm_snapshot while the monitor is held = %q", out)
		}
		release()
		for deadline := time.Now().Add(backendtest.HangGuard); ; time.Sleep(200 * time.Millisecond) {
			out := mustOK(t, cs, "vm_list_my_vms", nil)
			if !strings.Contains(out, "note:") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("vm_list_my_vms after the monitor was let go = %q", out)
			}
		}
		mustOK(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "ctrl-u"})

		cs2 := connect(t, startServer(t, cfg, nil))
		for i, part := range []string{"echo on", "e-tw", "o > /tmp/shared"} {
			on := []*mcp.ClientSession{cs, cs2}[i%2]
			mustOK(t, on, "ui_type", map[string]any{"vmid": vmid, "text": part})
		}
		mustOK(t, cs2, "ui_key", map[string]any{"vmid": vmid, "key": "ret"})
		for deadline := time.Now().Add(backendtest.HangGuard); ; time.Sleep(300 * time.Millisecond) {
			out := mustOK(t, cs2, "vm_exec", map[string]any{"vmid": vmid, "command": "cat /tmp/shared"})
			if out == "exit 0\none-two\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the command typed by two servers in turn: %q", out)
			}
		}
	})

	t.Run("snapshot and rollback", func(t *testing.T) {
		mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "echo before > /tmp/state"})
		mustOK(t, cs, "vm_snapshot", map[string]any{"vmid": vmid, "name": "s1", "wait": 50})
		mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "echo after > /tmp/state"})
		mustOK(t, cs, "vm_rollback", map[string]any{"vmid": vmid, "name": "s1", "wait": 50})
		if out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "cat /tmp/state"}); out != "exit 0\nbefore\n" {
			t.Fatalf("after rollback: %q", out)
		}
		mustRefuse(t, cs, "vm_rollback", map[string]any{"vmid": vmid, "name": "nosuch"}, "not found")
	})

	t.Run("ownership", func(t *testing.T) {
		be := backendOf(t, s, "local")
		lc := be.(backends.Lifecycle)
		foreign, task, err := lc.Clone(ctx, backends.CloneRequest{Template: 9000, Name: "other-repro-x"})
		if err != nil {
			t.Fatal(err)
		}
		be.(*qemu.Driver).WaitTask(ctx, task.ID)
		defer lc.Destroy(ctx, foreign)
		args := map[string]any{"vmid": foreign, "command": "true"}
		mustRefuse(t, cs, "vm_exec", args, "is not yours")
		mustRefuse(t, cs, "vm_destroy", map[string]any{"vmid": foreign, "confirm": true}, "is not yours")
		mustRefuse(t, cs, "vm_start", map[string]any{"vmid": 9000}, "template")
		mustRefuse(t, cs, "vm_task_wait", map[string]any{"upid": task.ID}, "which is not yours")
		if out := mustOK(t, cs, "vm_list_my_vms", nil); strings.Contains(out, "other-repro-x") {
			t.Fatalf("vm_list_my_vms shows a foreign VM: %q", out)
		}
		if vm, _ := lc.VM(ctx, foreign); vm.Status != "stopped" {
			t.Fatalf("a refused call changed the foreign VM: %+v", vm)
		}
	})

	t.Run("one VM serializes, others run", func(t *testing.T) {
		other := atoi(t, cloneTiny(t, cs, "other"))
		defer call(t, cs, "vm_destroy", map[string]any{"vmid": other, "confirm": true, "wait": 50})
		// The exec holds the VM until the test writes its release file
		// through the backend, beneath the locks.
		be := backendOf(t, s, "local")
		execOut := make(chan string, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "vm_exec", Arguments: map[string]any{"vmid": vmid,
				"command": "while [ ! -e /tmp/release ]; do sleep 0.1; done; echo released"}})
			if err != nil {
				execOut <- err.Error()
				return
			}
			execOut <- resultText(res)
		}()
		// Until the exec holds the lock a screenshot goes through; then it
		// waits the busy wait (1 s here) and is refused.
		for deadline := time.Now().Add(backendtest.HangGuard); ; {
			out, res := call(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
			if res.IsError && strings.Contains(out, "is busy") {
				break
			}
			if res.IsError || len(execOut) > 0 || time.Now().After(deadline) {
				t.Fatalf("ui_screenshot while an exec holds the VM = %q", out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		mustOK(t, cs, "vm_snapshot", map[string]any{"vmid": other, "name": "cold"})
		if err := be.(backends.Guest).WriteFile(ctx, vmid, "/tmp/release", nil); err != nil {
			t.Fatal(err)
		}
		if out := <-execOut; out != "exit 0\nreleased\n" {
			t.Fatalf("the exec holding the VM answered %q", out)
		}
		mustOK(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
	})

	t.Run("progress notifications", func(t *testing.T) {
		var got []*mcp.ProgressNotificationParams
		var mu sync.Mutex
		client := mcp.NewClient(&mcp.Implementation{Name: "progress", Version: "1"}, &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				got = append(got, req.Params)
				mu.Unlock()
			},
		})
		st, ct := mcp.NewInMemoryTransports()
		ss, err := s.MCP().Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ss.Close()
		pc, err := client.Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		// The command runs until its gate file exists: the call waits its
		// whole 5 s however slow the machine is.
		params := &mcp.CallToolParams{Name: "vm_run", Arguments: map[string]any{"vmid": vmid, "command": "while [ ! -e /tmp/progress-gate ]; do sleep 0.2; done", "wait": 5}}
		params.SetProgressToken("run-1")
		res, err := pc.CallTool(ctx, params)
		if err != nil || res.IsError || !strings.HasPrefix(resultText(res), "running for") {
			t.Fatalf("vm_run: %v %v", err, res)
		}
		mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "touch /tmp/progress-gate"})
		mu.Lock()
		defer mu.Unlock()
		// The wait lasts 5 s by construction; progress comes every 2 s.
		if len(got) == 0 || got[0].ProgressToken != "run-1" || got[0].Total != 5 || !strings.Contains(got[0].Message, "progress-gate") {
			t.Fatalf("progress notifications: %+v", got)
		}
	})

	t.Run("a client that drops mid-call over HTTP", func(t *testing.T) {
		ts := httptest.NewServer(s.Handler())
		defer ts.Close()
		hc, err := httpClient(t, ts.URL, map[string]string{"Authorization": "Bearer tester-token-0123456789"})
		if err != nil {
			t.Fatal(err)
		}
		// The command never ends by itself (until the gate file exists): only
		// a server that abandons the dropped call is done before the exec's
		// own 120 s timeout.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = hc.CallTool(cctx, &mcp.CallToolParams{Name: "vm_exec", Arguments: map[string]any{"vmid": vmid,
			"command": "while [ ! -e /tmp/drop-gate ]; do sleep 0.1; done"}})
		cancel()
		if err == nil {
			t.Fatal("the dropped call answered")
		}
		hc.Close()
		wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
		defer wcancel()
		if err := s.Wait(wctx); err != nil {
			t.Fatalf("the call still runs 60 s after its client dropped: the server did not abandon it: %v", err)
		}
		mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "touch /tmp/drop-gate"}) // the VM is free again
		if code, _ := get(t, ts.URL+"/healthz", "", nil); code != 200 {
			t.Fatalf("/healthz after a dropped client: %d", code)
		}
		mustOK(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
	})

	t.Run("stop", func(t *testing.T) {
		mustOK(t, cs, "vm_stop", map[string]any{"vmid": vmid, "wait": 50})
		if out := mustOK(t, cs, "vm_list_my_vms", nil); !strings.Contains(out, id+"\ttester-repro-flow\tlocal\tstopped") {
			t.Fatalf("after vm_stop: %q", out)
		}
		mustOK(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50})
		if out := mustOK(t, cs, "vm_list_my_vms", nil); strings.Contains(out, "flow") {
			t.Fatalf("after vm_destroy: %q", out)
		}
	})
}
