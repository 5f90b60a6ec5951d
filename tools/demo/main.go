// Command demo runs a short poligon session through a real MCP client: it
// starts `poligon serve --stdio`, clones the tiny template, boots it, runs
// uname -a, types into the console, saves a screenshot as evidence and
// destroys the VM, printing each step and its time. `make demo` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	bin := flag.String("poligon", "bin/poligon", "the poligon binary")
	evidence := flag.String("evidence", "evidence", "where the screenshot goes")
	flag.Parse()
	if err := run(*bin, *evidence); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// session wraps the client with a step printer.
type session struct {
	cs    *mcp.ClientSession
	start time.Time
}

func (s *session) step(what, tool string, args map[string]any) (string, error) {
	t := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", fmt.Errorf("%s: %w", tool, err)
	}
	var texts []string
	images := 0
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			texts = append(texts, c.Text)
		case *mcp.ImageContent:
			images++
		}
	}
	out := strings.Join(texts, "\n")
	shown := strings.ReplaceAll(strings.TrimSpace(out), "\n", "\n            ")
	if images > 0 {
		shown += fmt.Sprintf("  [+%d image]", images)
	}
	fmt.Printf("%6.1fs %5.1fs  %-28s %s\n            %s\n", time.Since(s.start).Seconds(), time.Since(t).Seconds(), what, tool, shown)
	if res.IsError {
		return out, errors.New(out)
	}
	return out, nil
}

var vmidRe = regexp.MustCompile(`vmid (\d+)`)

func run(bin, evidence string) error {
	abs, err := filepath.Abs(evidence)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve", "--stdio", "--evidence-dir", abs)
	logFile := filepath.Join(evidence, "demo-server.log")
	serverLog, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer serverLog.Close()
	cmd.Stderr = serverLog
	defer fmt.Printf("the server's log is %s\n", logFile)
	client := mcp.NewClient(&mcp.Implementation{Name: "poligon-demo", Version: "1"}, nil)
	fmt.Printf("starting %s serve --stdio (MCP over stdio)\n", bin)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	s := &session{cs: cs, start: time.Now()}
	fmt.Printf("%7s %6s  %-28s %s\n", "total", "step", "what", "tool and answer")

	if _, err := s.step("list templates", "vm_list_templates", nil); err != nil {
		return err
	}
	out, err := s.step("clone tiny (linked)", "vm_clone", map[string]any{"template_vmid": 9000, "name": "demo", "full": false})
	if err != nil && strings.Contains(out, "already exists") {
		// A VM left by an earlier demo that did not finish: start afresh.
		m := vmidRe.FindStringSubmatch(out)
		if m == nil {
			return err
		}
		if _, err := s.step("destroy the earlier demo VM", "vm_destroy", map[string]any{"vmid": atoi(m[1]), "confirm": true, "wait": 50}); err != nil {
			return err
		}
		out, err = s.step("clone tiny (linked)", "vm_clone", map[string]any{"template_vmid": 9000, "name": "demo", "full": false})
	}
	if err != nil {
		return err
	}
	m := vmidRe.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("vm_clone answered %q", out)
	}
	vmid := atoi(m[1])
	defer s.step("destroy", "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50})

	if _, err := s.step("start", "vm_start", map[string]any{"vmid": vmid}); err != nil {
		return err
	}
	for i := 0; ; i++ {
		out, err := s.step("wait for the guest agent", "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 50})
		if err != nil {
			return err
		}
		if strings.HasPrefix(out, "booted") {
			break
		}
		if i == 4 {
			return errors.New("the VM did not boot")
		}
	}
	if _, err := s.step("run uname -a", "vm_exec", map[string]any{"vmid": vmid, "command": "uname -a"}); err != nil {
		return err
	}
	if _, err := s.step("type on the console", "ui_type", map[string]any{"vmid": vmid, "text": "echo hello from poligon"}); err != nil {
		return err
	}
	if _, err := s.step("press Enter, then look", "ui_key", map[string]any{"vmid": vmid, "key": "ret", "screenshot": true, "settle_ms": 3000}); err != nil {
		return err
	}
	out, err = s.step("read the screen (OCR)", "ui_read", map[string]any{"vmid": vmid})
	if err != nil {
		return err
	}
	if !strings.Contains(out, "hello from poligon") {
		fmt.Printf("            (OCR did not read the typed line; the screen is in the screenshot below)\n")
	}
	if _, err := s.step("save a screenshot", "ui_screenshot", map[string]any{"vmid": vmid, "path": "demo.png"}); err != nil {
		return err
	}
	fmt.Printf("the screenshot is %s\n", filepath.Join(evidence, "demo.png"))
	return nil
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}
