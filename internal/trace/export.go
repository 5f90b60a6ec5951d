package trace

import (
	"archive/zip"
	"bytes"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"image"
	"image/png"
	"io"
	"strings"
	"time"
)

// A trace written out: one HTML file that opens from disk in any browser
// (every frame inline, no request leaves the page), or a zip of the steps
// as JSON, the frames as PNGs and the same page reading them beside it.

// Export is what a trace is written from.
type Export struct {
	Title string
	Steps []Step
	// Frame answers a frame's PNG by digest (Recorder.Frame); a frame it
	// cannot answer is left out of the page.
	Frame func(digest string) ([]byte, error)
}

// page is a step as the page and steps.json show it.
type page struct {
	Step
	N       int
	Offset  string // from the first step
	Failed  bool
	Changed *Box `json:",omitempty"` // the area that changed between the frames
	Args    string
}

// Box is a rectangle in frame pixels and in percent of the frame (for the
// page's overlay).
type Box struct {
	X, Y, W, H            int
	Left, Top, Wide, Tall float64
	FrameWidth, FrameHigh int
}

//go:embed page.html
var pageFS embed.FS

var pageTemplate = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"seconds": func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) },
	"clock":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") },
}).ParseFS(pageFS, "page.html"))

// view prepares the steps and reads their frames once each.
func (e Export) view() ([]page, map[string][]byte) {
	frames := map[string][]byte{}
	read := func(d string) []byte {
		if d == "" || e.Frame == nil {
			return nil
		}
		if b, ok := frames[d]; ok {
			return b
		}
		b, err := e.Frame(d)
		if err != nil {
			b = nil
		}
		frames[d] = b
		return b
	}
	var out []page
	var first time.Time
	for i, s := range e.Steps {
		if i == 0 {
			first = s.At
		}
		p := page{Step: s, N: i + 1, Offset: fmt.Sprintf("+%.1f s", s.At.Sub(first).Seconds()), Failed: s.Outcome != "" && s.Outcome != "ok"}
		var pretty bytes.Buffer
		if json.Indent(&pretty, s.Args, "", "  ") == nil {
			p.Args = pretty.String()
		}
		before, after := read(s.Before), read(s.After)
		if before == nil {
			p.Step.Before = ""
		}
		if after == nil {
			p.Step.After = ""
		}
		if before != nil && after != nil && s.Before != s.After {
			p.Changed = changedBox(before, after)
		}
		out = append(out, p)
	}
	for d, b := range frames {
		if b == nil {
			delete(frames, d)
		}
	}
	return out, frames
}

// HTML writes the trace as one self-contained page.
func (e Export) HTML(w io.Writer) error {
	steps, frames := e.view()
	data := map[string]string{}
	for d, b := range frames {
		data[d] = "data:image/png;base64," + base64.StdEncoding.EncodeToString(b)
	}
	return e.render(w, steps, data)
}

func (e Export) render(w io.Writer, steps []page, frames map[string]string) error {
	failed := 0
	for _, s := range steps {
		if s.Failed {
			failed++
		}
	}
	// The frames travel as JSON in the page and are set by its script, once
	// each however many steps show them.
	raw, err := json.Marshal(frames)
	if err != nil {
		return err
	}
	return pageTemplate.Execute(w, map[string]any{
		"Title": e.Title, "Steps": steps, "Failed": failed, "Frames": template.JS(raw),
	})
}

// Zip writes the trace as steps.json, frames/<digest>.png and index.html
// (the page, reading the frames beside it).
func (e Export) Zip(w io.Writer) error {
	steps, frames := e.view()
	z := zip.NewWriter(w)
	put := func(name string, b []byte) error {
		f, err := z.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Now()})
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		return err
	}
	refs := map[string]string{}
	for d, b := range frames {
		name := "frames/" + d + ".png"
		if err := put(name, b); err != nil {
			return err
		}
		refs[d] = name
	}
	type stepJSON struct {
		page
		BeforeFile string `json:",omitempty"`
		AfterFile  string `json:",omitempty"`
	}
	var list []stepJSON
	for _, s := range steps {
		list = append(list, stepJSON{page: s, BeforeFile: refs[s.Before], AfterFile: refs[s.After]})
	}
	raw, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if err := put("steps.json", raw); err != nil {
		return err
	}
	var html bytes.Buffer
	if err := e.render(&html, steps, refs); err != nil {
		return err
	}
	if err := put("index.html", html.Bytes()); err != nil {
		return err
	}
	return z.Close()
}

// changedBox is where two frames of one size differ, nil when they do not
// or cannot be compared.
func changedBox(before, after []byte) *Box {
	a, err1 := png.Decode(bytes.NewReader(before))
	b, err2 := png.Decode(bytes.NewReader(after))
	if err1 != nil || err2 != nil || a.Bounds() != b.Bounds() {
		return nil
	}
	r := a.Bounds()
	box := image.Rectangle{}
	pa, sa := pixels(a)
	pb, sb := pixels(b)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		if pa != nil && pb != nil && sa == sb {
			// Same layout: compare rows as bytes, pixels only where they differ.
			ra, rb := pa[(y-r.Min.Y)*sa:][:r.Dx()*4], pb[(y-r.Min.Y)*sb:][:r.Dx()*4]
			if bytes.Equal(ra, rb) {
				continue
			}
			for x := 0; x < r.Dx(); x++ {
				if !bytes.Equal(ra[x*4:x*4+4], rb[x*4:x*4+4]) {
					box = box.Union(image.Rect(r.Min.X+x, y, r.Min.X+x+1, y+1))
				}
			}
			continue
		}
		for x := r.Min.X; x < r.Max.X; x++ {
			if a.At(x, y) != b.At(x, y) {
				box = box.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	if box.Empty() {
		return nil
	}
	fw, fh := float64(r.Dx()), float64(r.Dy())
	return &Box{X: box.Min.X, Y: box.Min.Y, W: box.Dx(), H: box.Dy(),
		Left: 100 * float64(box.Min.X) / fw, Top: 100 * float64(box.Min.Y) / fh,
		Wide: 100 * float64(box.Dx()) / fw, Tall: 100 * float64(box.Dy()) / fh,
		FrameWidth: r.Dx(), FrameHigh: r.Dy()}
}

// pixels answers an image's 4-byte pixels and stride, nil for another kind.
func pixels(m image.Image) ([]byte, int) {
	switch m := m.(type) {
	case *image.RGBA:
		return m.Pix, m.Stride
	case *image.NRGBA:
		return m.Pix, m.Stride
	}
	return nil, 0
}

// FileName is a trace file's name for a scope and a time: trace-vm101-
// 20261204-101500.html.
func FileName(scope string, at time.Time, ext string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(scope))
	return fmt.Sprintf("trace-%s-%s.%s", clean, at.UTC().Format("20060102-150405"), ext)
}
