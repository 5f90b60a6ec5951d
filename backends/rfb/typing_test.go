package rfb

import (
	"context"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// serialLog collects what the guest writes to its serial port.
type serialLog struct {
	mu      sync.Mutex
	buf     strings.Builder
	changed chan struct{}
}

func openSerial(t testing.TB, vm *qemuVM) *serialLog {
	t.Helper()
	conn, err := net.Dial("unix", vm.serial)
	if err != nil {
		t.Fatalf("serial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &serialLog{changed: make(chan struct{}, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := conn.Read(b)
			if n > 0 {
				s.mu.Lock()
				s.buf.Write(b[:n])
				s.mu.Unlock()
				select {
				case s.changed <- struct{}{}:
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *serialLog) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until the log from offset on, terminal escapes removed,
// contains want; it answers that text up to the end of want.
func (s *serialLog) waitFor(t testing.TB, from int, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		text := stripANSI(s.text()[from:])
		if i := strings.Index(text, want); i >= 0 {
			return text[:i+len(want)]
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("the guest did not print %q within %v; serial so far:\n%s", want, timeout, stripANSI(s.text()[from:]))
		}
	}
}

// waitQuiet waits until the guest printed nothing for quiet (at most max).
func (s *serialLog) waitQuiet(quiet, max time.Duration) {
	deadline := time.After(max)
	for {
		select {
		case <-s.changed:
		case <-time.After(quiet):
			return
		case <-deadline:
			return
		}
	}
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;=?:]*[A-Za-z]`) // OVMF writes column 100 as ":0"

func stripANSI(s string) string { return ansiEscape.ReplaceAllString(s, "") }

// uefiShell is OVMF's built-in UEFI shell on a machine with no disks: a real
// guest that reads the PS/2 keyboard and echoes every typed character on
// both the screen and the serial port.
type uefiShell struct {
	vm     *qemuVM
	serial *serialLog
	client *Client
}

func startUEFIShell(t testing.TB, delay time.Duration, vncOptions string) *uefiShell {
	t.Helper()
	vm := startQEMU(t, qemuOptions{ovmf: true, serial: true, vncOptions: vncOptions})
	sh := &uefiShell{vm: vm, serial: openSerial(t, vm)}
	sh.client = connect(t, Config{Dial: vm.dialer(), KeyDelay: delay})
	sh.serial.waitFor(t, 0, "Shell> ", 180*time.Second)
	return sh
}

// typeLine types text at the prompt and answers what the shell echoed and
// how long the text took from the first key to its echo. ESC then clears
// the line for the next one.
func (sh *uefiShell) typeLine(t testing.TB, text string) (string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	start := len(sh.serial.text())
	began := time.Now()
	// Markers around the text show where its echo begins (after whatever
	// the shell still redraws of the last line) and ends.
	if err := sh.client.Type(ctx, "#BEGIN#"+text+"#END#"); err != nil {
		t.Fatal(err)
	}
	echo := sh.serial.waitFor(t, start, "#END#", 60*time.Second)
	took := time.Since(began)
	if err := sh.client.Key(ctx, "esc"); err != nil {
		t.Fatal(err)
	}
	sh.serial.waitQuiet(200*time.Millisecond, 10*time.Second) // the shell blanks the line
	// Long lines wrap: drop the line breaks the shell adds.
	echo = strings.NewReplacer("\r", "", "\n", "").Replace(echo)
	if i := strings.LastIndex(echo, "#BEGIN#"); i >= 0 {
		echo = echo[i+len("#BEGIN#"):]
	}
	return strings.TrimSuffix(echo, "#END#"), took
}

// TestQEMUTypingIntoUEFIShell types every printable US character into a
// real guest at the default pace, then a 400-character line (more than
// QEMU's input queue holds, so a client faster than QEMU's key delay would
// lose its tail), and checks the guest received each key once, in order.
func TestQEMUTypingIntoUEFIShell(t *testing.T) {
	if testing.Short() {
		t.Skip("boots UEFI firmware (about 10 s under TCG)")
	}
	sh := startUEFIShell(t, 0, "")
	var all strings.Builder
	for r := rune('!'); r <= '~'; r++ {
		all.WriteRune(r)
	}
	printable := all.String()
	lines := []string{"Hello, World! a_b&c", printable[:47], printable[47:],
		"The Quick Brown Fox 0123456789 ~!@#$%^&*()_+{}|:<>?", strings.Repeat("abcdefghi ", 40)}
	for _, line := range lines {
		if got, _ := sh.typeLine(t, line); got != line {
			t.Errorf("typed %q\nguest got %q", line, got)
		}
	}
}

// BenchmarkTypeIntoUEFIShell measures intact typing speed into a real
// guest: with QEMU's default key delay (10 ms) and the client's default,
// and with -vnc ...,key-delay-ms=4 and a 5 ms client delay. Each iteration
// types one 60-character line; damaged lines are counted, not hidden.
func BenchmarkTypeIntoUEFIShell(b *testing.B) {
	const line = "The quick brown fox jumps over the lazy dog 0123456789 x_Y&z"
	for _, setup := range []struct {
		name       string
		vncOptions string
		delay      time.Duration
	}{
		{"qemu-default/client-10ms", "", DefaultKeyDelay},
		{"key-delay-ms=4/client-5ms", ",key-delay-ms=4", 5 * time.Millisecond},
	} {
		b.Run(setup.name, func(b *testing.B) {
			sh := startUEFIShell(b, setup.delay, setup.vncOptions)
			b.ResetTimer()
			lost, typing := 0, time.Duration(0)
			for i := 0; i < b.N; i++ {
				got, took := sh.typeLine(b, line)
				typing += took
				if got != line {
					lost++
					b.Logf("typed %q\nguest got %q", line, got)
				}
			}
			b.ReportMetric(float64(b.N*(len("#BEGIN#")+len(line)+len("#END#")))/typing.Seconds(), "chars/s")
			b.ReportMetric(float64(lost)/float64(b.N), "damaged-lines/op")
		})
	}
}
