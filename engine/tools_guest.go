package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
)

// The guest tools: commands and files through the guest agent.

type execArgs struct {
	VMID    int    `json:"vmid" min:"1"`
	Command string `json:"command" desc:"run as root by /bin/sh, umask 022, in the guest's locale (prefix LC_ALL=C for English)"`
	Timeout int    `json:"timeout,omitempty" desc:"seconds it may run; longer: vm_run" call:"exec timeout" min:"1" max:"3600"`
}

type runArgs struct {
	VMID    int     `json:"vmid" min:"1"`
	Command string  `json:"command" desc:"the same command again keeps waiting"`
	Wait    float64 `json:"wait,omitempty" desc:"seconds to wait" call:"run wait" min:"0" max:"max_wait"`
	Restart bool    `json:"restart,omitempty" desc:"run it again though a run of it finished" default:"false"`
}

type execGUIArgs struct {
	VMID       int     `json:"vmid" min:"1"`
	Command    string  `json:"command" desc:"e.g. gedit /etc/hosts"`
	User       string  `json:"user,omitempty" desc:"the desktop user" call:"execGui user"`
	Screenshot bool    `json:"screenshot,omitempty" desc:"answer with the screen after it, once settled" default:"false"`
	SettleMs   int     `json:"settle_ms,omitempty" desc:"the longest wait for it to settle" default:"5000" min:"0" max:"max_wait_ms"`
	Scale      float64 `json:"scale,omitempty" desc:"downscale the screenshot" min:"0" max:"1"`
	WaitWindow string  `json:"wait_window,omitempty" desc:"with screenshot: wait for a window whose title or class contains this"`
}

type fileReadArgs struct {
	VMID     int    `json:"vmid" min:"1"`
	Path     string `json:"path" desc:"absolute, in the guest"`
	Offset   int    `json:"offset,omitempty" desc:"continue a truncated read" call:"file.read offset" min:"0"`
	MaxBytes int    `json:"max_bytes,omitempty" call:"file.read max" min:"1" max:"1048576"`
}

type fileWriteArgs struct {
	VMID          int    `json:"vmid" min:"1"`
	Path          string `json:"path" desc:"absolute, in the guest; replaced"`
	ContentBase64 string `json:"content_base64"`
}

func guestTools() []*Tool {
	return []*Tool{
		newTool(Def{Name: "vm_exec", Toolset: "vm", Title: "Run a shell command",
			Description: "Run a shell command in the guest as root (guest agent): answers exit N, stdout, then stderr after a --- stderr line.",
			Summary:     "Shell command as root, umask 022: `exit N`, stdout, `--- stderr`, stderr",
			Effect:      runsInGuest("any shell command, as root")}, execTool),
		newTool(Def{Name: "vm_run", Toolset: "vm", Title: "Run a long command",
			Description: "Run a long command detached as root (dist-upgrade, build, reboot): answers done or failed exit N after S s, or running for S s, and its last 20 output lines. The same command again keeps waiting; a finished run is reported, not repeated; a reboot is waited through.",
			Summary:     "A long command detached (survives a reboot); call again to keep waiting",
			Effect:      runsInGuest("any long command, as root; restart=true runs it again")}, runTool),
		newTool(Def{Name: "vm_exec_gui", Toolset: "vm", Screen: true, Title: "Launch a GUI program",
			Description: "Launch a GUI program detached in the user's desktop session, with its DISPLAY, WAYLAND_DISPLAY, D-Bus and locale: answers whether it runs after 2 s and its first output lines.",
			Summary:     "Launch a program in the user's desktop session",
			Effect:      runsInGuest("any program, as the desktop user")}, execGUI),
		newTool(Def{Name: "vm_file_read", Toolset: "vm", Title: "Read a file from the guest",
			Description: "Read a guest file: text from offset, at most max_bytes (a last line says truncated at N of M: continue with offset=N); a PNG or JPEG as an image.",
			Summary:     "A window of a file (`… truncated at N of M bytes, continue with offset=N`); PNG/JPEG as an image",
			Effect:      readOnly("reads a file through the guest agent")}, fileRead),
		newTool(Def{Name: "vm_file_write", Toolset: "vm", Title: "Write a file in the guest",
			Description: "Write a file into the guest, replacing it.",
			Summary:     "Write a file",
			Effect:      destructiveOnce("replaces the file: its old content is lost"),
			Redact:      []string{"content_base64"}}, fileWrite),
	}
}

// execAnswer renders a finished command: exit N, stdout, then stderr after
// a --- stderr line.
func execAnswer(r hostapi.ExecResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit %d\n", r.Exit)
	if r.Signal != 0 {
		fmt.Fprintf(&b, "(killed by signal %d)\n", r.Signal)
	}
	b.WriteString(safeText(r.Stdout))
	if len(r.Stderr) > 0 {
		if len(r.Stdout) > 0 && !bytes.HasSuffix(r.Stdout, []byte("\n")) {
			b.WriteByte('\n')
		}
		b.WriteString("--- stderr\n")
		b.WriteString(safeText(r.Stderr))
	}
	if r.Truncated {
		b.WriteString("\n(output truncated by the guest agent: redirect it to a file and read that with vm_file_read)")
	}
	return b.String()
}

// safeText keeps valid UTF-8 as is and marks invalid bytes.
func safeText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func execTool(ctx context.Context, c *Call, in *execArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		r, err := v.Exec(ctx, in.Command, time.Duration(in.Timeout)*time.Second)
		if err != nil {
			return nil, err
		}
		return text("%s", execAnswer(r)), nil
	})
}

func runTool(ctx context.Context, c *Call, in *runArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		st, err := v.Run(ctx, in.Command, secs(in.Wait), in.Restart)
		if err != nil {
			return nil, err
		}
		var head string
		switch st.State {
		case "done", "failed":
			head = fmt.Sprintf("%s exit %d after %.0f s", st.State, st.Exit, st.Elapsed.Seconds())
		default:
			head = fmt.Sprintf("running for %.0f s: call vm_run again with the same command to keep waiting", st.Elapsed.Seconds())
		}
		if st.Note != "" {
			head += "\n(" + st.Note + ")"
		}
		if st.Tail != "" {
			head += "\n" + st.Tail
		}
		return text("%s", head), nil
	})
}

func execGUI(ctx context.Context, c *Call, in *execGUIArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		r, err := v.ExecGUI(ctx, in.Command, in.User)
		if err != nil {
			return nil, err
		}
		head := "running after 2 s"
		if !r.Running {
			head = fmt.Sprintf("exited %d within 2 s", r.Exit)
		}
		res := text("%s\n%s", head, r.Output)
		if !in.Screenshot {
			return res, nil
		}
		return afterAction(ctx, c, v, res, afterArgs{Screenshot: true, SettleMs: in.SettleMs, Scale: in.Scale, WaitWindow: in.WaitWindow}, in.User, hostapi.ShotNote{User: in.User})
	})
}

// imageType answers the MIME type of a PNG or JPEG.
func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(b, []byte{0xFF, 0xD8, 0xFF}):
		return "image/jpeg"
	}
	return ""
}

// maxImage is the largest image vm_file_read returns whole.
const maxImage = 8 << 20

func fileRead(ctx context.Context, c *Call, in *fileReadArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		data, size, err := v.ReadFile(ctx, in.Path, int64(in.Offset), int64(in.MaxBytes))
		if err != nil {
			return nil, err
		}
		if mime := imageType(data); mime != "" && in.Offset == 0 {
			if size > int64(len(data)) && size <= maxImage {
				if data, _, err = v.ReadFile(ctx, in.Path, 0, size); err != nil {
					return nil, err
				}
			}
			if int64(len(data)) == size {
				return &mcp.CallToolResult{Content: []mcp.Content{
					&mcp.TextContent{Text: fmt.Sprintf("%s: %s, %d bytes", in.Path, mime, size)},
					&mcp.ImageContent{MIMEType: mime, Data: data},
				}}, nil
			}
		}
		var b strings.Builder
		if utf8.Valid(data) || utf8.Valid(trimPartialRune(data)) {
			b.Write(data)
		} else {
			fmt.Fprintf(&b, "(binary: %d bytes as base64)\n%s", len(data), base64.StdEncoding.EncodeToString(data))
		}
		end := int64(in.Offset) + int64(len(data))
		if end < size {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "… truncated at %d of %d bytes, continue with offset=%d", end, size, end)
		}
		return text("%s", b.String()), nil
	})
}

// trimPartialRune drops a multi-byte character cut by the window's end, so
// a text window is not mistaken for binary.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.Valid(b[:len(b)-i]) {
			return b[:len(b)-i]
		}
	}
	return b
}

func fileWrite(ctx context.Context, c *Call, in *fileWriteArgs) (*mcp.CallToolResult, error) {
	data, err := base64.StdEncoding.DecodeString(in.ContentBase64)
	if err != nil {
		return nil, hostapi.Failf("content_base64 is standard base64 with padding", "content_base64 is not valid base64: %v", err)
	}
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		if err := v.WriteFile(ctx, in.Path, data); err != nil {
			return nil, err
		}
		return text("ok: wrote %d bytes to %s", len(data), in.Path), nil
	})
}
