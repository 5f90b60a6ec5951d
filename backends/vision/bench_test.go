package vision

import (
	"fmt"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends/vision/visiontest"
)

// BenchmarkElements is the client's overhead per call against a fake that
// answers at once (the fake's own decoding included): resize, PNG, base64,
// HTTP on loopback, JSON, parsing ~60 elements.
func BenchmarkElements(b *testing.B) {
	for _, resize := range []string{ResizeNone, ResizeQwen25} {
		b.Run(resize, func(b *testing.B) {
			srv := newServer(b)
			frame, els := uiFrame(1280, 800)
			srv.SetTruth(&visiontest.Truth{Coords: CoordsPixels, W: 1280, H: 800, Elements: els})
			cl := testClient(b, srv, Endpoint{Resize: resize}, Options{})
			b.ReportAllocs()
			for b.Loop() {
				l, err := cl.Elements(b.Context(), frame)
				if err != nil || len(l.Elements) != len(els) {
					b.Fatalf("%d elements, %v", len(l.Elements), err)
				}
			}
		})
	}
}

// BenchmarkStages splits the client's own work, to say what dominates.
func BenchmarkStages(b *testing.B) {
	frame, els := uiFrame(1280, 800)
	ep := Endpoint{Resize: ResizeQwen25}
	sw, sh := ep.SendSize(1280, 800)
	b.Run("resize-1280x800-to-1288x812", func(b *testing.B) {
		for b.Loop() {
			_, release := sendImage(frame, sw, sh)
			release()
		}
	})
	resized, _ := sendImage(frame, sw, sh)
	b.Run("png-1288x812-resized", func(b *testing.B) {
		var n int
		for b.Loop() {
			p, _ := encodePNG(resized)
			n = len(p)
		}
		b.ReportMetric(float64(n), "bytes")
	})
	b.Run("png-1280x800", func(b *testing.B) {
		var n int
		for b.Loop() {
			p, _ := encodePNG(frame)
			n = len(p)
		}
		b.ReportMetric(float64(n), "bytes")
	})
	cl, _ := New(Endpoint{Purpose: PurposeVision, URL: "http://127.0.0.1:1/v1/chat/completions", Model: "m"}, Options{})
	p, _ := encodePNG(frame)
	b.Run("body", func(b *testing.B) {
		for b.Loop() {
			cl.body(listSystemPrompt, listPrompt(CoordsPixels, 1280, 800), p)
		}
	})
	var answer strings.Builder
	for _, e := range els {
		fmt.Fprintf(&answer, "%d\t%d\t%s\t%s\n", e.X, e.Y, e.Type, e.Label)
	}
	m := mapper{w: 1280, h: 800, limX: 1280, limY: 800}
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			parseList(answer.String(), false, m)
		}
	})
}
