package pikvm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/editdist"
)

// benchText is a shell-ish line of mixed text: lower case mostly, some
// capitals and symbols, as typed commands are.
const benchText = "for f in /etc/*.conf; do echo \"$f: $(wc -l <$f)\" >>/tmp/Out.txt; done # 0123456789 ABC xyz {[()]} ~!@%^&*_+=|\\:;'<>,.?\n"

// Typing through the kvmd fake into the guest's tty: characters per second
// of the typing itself, and how many arrive lost or changed (edit
// distance). The default pace must lose none; faster paces show what
// hid/print does at speed.
func BenchmarkKVMType(b *testing.B) {
	for _, c := range []struct {
		name    string
		delay   time.Duration
		version string
	}{
		{"default-12ms", 0, ""},
		{"10ms", 10 * time.Millisecond, ""},
		{"8ms", 8 * time.Millisecond, ""},
		{"unpaced", time.Nanosecond, ""}, // hid/print as kvmd sends it by itself
		{"kvmd-4.80-keys", 0, "4.80"},    // no print delay: key by key, paced here
	} {
		b.Run(c.name, func(b *testing.B) {
			vm, agent := machine(b)
			opts := fakeOpts(vm)
			opts.Version = c.version
			srv := startFake(b, opts)
			ctl := screenOf(b, newBench(b, srv, nil))
			typist := ctl
			if c.delay != 0 {
				typist = screenOf(b, newBench(b, srv, func(cfg *Config) { cfg.KeyDelay = c.delay }))
			}
			text := strings.Repeat(benchText, 2)
			var typing time.Duration
			var lost, total int
			b.ResetTimer()
			for range b.N {
				got, took := typeIntoCatWith(b, srv, ctl, typist, agent, "/tmp/bench", text)
				typing += took
				lost += editdist.Levenshtein(text, got)
				total += len(text)
				if c.delay == 0 && got != text {
					b.Errorf("the default pace lost characters: got\n%q\nwant\n%q", got, text)
				}
			}
			b.ReportMetric(float64(total-lost)/typing.Seconds(), "intact-chars/s")
			b.ReportMetric(float64(lost)/float64(b.N), "lost-chars/op")
			b.ReportMetric(float64(len(text)), "chars/op")
		})
	}
}

// The backend's Frame (the snapshot GET plus its decoding) against a raw
// snapshot GET of the same fake, in the same run, alternating. The fake
// captures afresh for every request (FramePeriod 1 ns), so neither side is
// served a cached frame the other paid for. "changing" writes to the
// console between rounds, so every Frame decodes a new JPEG; "static" lets
// it reuse the last one. hostapi's BenchmarkPiKVMScreenshot measures the
// whole of ui_screenshot (with the PNG).
func BenchmarkKVMScreenshot(b *testing.B) {
	for _, c := range []struct {
		name     string
		changing bool
		period   time.Duration
	}{
		{"static", false, time.Nanosecond},
		{"changing", true, time.Nanosecond},
	} {
		changing := c.changing
		b.Run(c.name, func(b *testing.B) {
			vm, agent := machine(b)
			opts := fakeOpts(vm)
			opts.FramePeriod = c.period
			srv := startFake(b, opts)
			s := screenOf(b, newBench(b, srv, nil))
			raw := rawClient(b, srv)
			ctx := context.Background()
			get := func() {
				req, _ := http.NewRequest("GET", srv.URL()+"/api/streamer/snapshot?allow_offline=1", nil)
				req.Header.Set("X-KVMD-User", testUser)
				req.Header.Set("X-KVMD-Passwd", testPassword)
				resp, err := raw.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("snapshot: %d", resp.StatusCode)
				}
			}
			if _, _, err := s.Frame(ctx); err != nil { // past the streamer's start
				b.Fatal(seen(err))
			}
			get()
			var tGet, tFrame time.Duration
			b.ResetTimer()
			for i := range b.N {
				if changing {
					b.StopTimer()
					mustGuest(b, agent, fmt.Sprintf(`printf '\033[?25lround %d\n' >/dev/tty1`, i))
					b.StartTimer()
				}
				t0 := time.Now()
				get()
				t1 := time.Now()
				if _, _, err := s.Frame(ctx); err != nil {
					b.Fatal(seen(err))
				}
				tGet, tFrame = tGet+t1.Sub(t0), tFrame+time.Since(t1)
			}
			n := float64(b.N)
			b.ReportMetric(tGet.Seconds()*1000/n, "get-ms")
			b.ReportMetric(tFrame.Seconds()*1000/n, "frame-ms")
			b.ReportMetric(float64(tFrame)/float64(tGet), "frame/get")
		})
	}
}
