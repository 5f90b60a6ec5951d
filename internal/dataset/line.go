package dataset

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
)

// Line is one index.jsonl line: one shot and what is known about it. Every
// field is written on every line, an unknown one as null (an empty string,
// a nil pointer), so a reader never has to guess whether a field exists.
type Line struct {
	Shot  string `json:"shot"`  // <session>/<agent>-shot-NNNN.png, relative to the capture
	ATSPI string `json:"atspi"` // its .atspi.json; null when no dump was written (ATSPIError says why)
	OCR   string `json:"ocr"`   // its .ocr.tsv; null when OCR did not run (OCRError says why)

	Click       *[2]int `json:"click"`        // the point a click aimed at, in frame pixels
	ClickSource string  `json:"click_source"` // how it was found: xy, ocr, elements, uground
	Label       string  `json:"label"`        // the label a click_label looked for
	Intent      string  `json:"intent"`       // the caller's stated goal
	Drag        *Drag   `json:"drag"`

	App       string `json:"app"`
	Locale    string `json:"locale"`     // the language alone (NormalizeLocale)
	LocaleRaw string `json:"locale_raw"` // what was actually seen or passed
	Theme     string `json:"theme"`

	Session string `json:"session"` // the session directory
	Bench   string `json:"bench"`
	Origin  string `json:"origin"` // the tool or scenario step that took the frame
	TS      string `json:"ts"`     // Unix seconds, as a string
	Req     string `json:"req"`    // the tool call's correlation id
	VMID    int    `json:"vmid"`
	Node    string `json:"node"`
	Agent   string `json:"agent"`

	FrameW   int      `json:"frame_w"`
	FrameH   int      `json:"frame_h"`
	GuestW   int      `json:"guest_w"` // the screen the dump describes
	GuestH   int      `json:"guest_h"`
	Rescaled *Rescale `json:"rescaled"` // set when the dump's boxes were scaled onto the frame

	ScreenChanged *bool  `json:"screen_changed"` // the screen moved between the frame and the re-check
	ATSPIWidgets  int    `json:"atspi_widgets"`
	ATSPIError    string `json:"atspi_error"`
	OCRError      string `json:"ocr_error"`
	Mode          string `json:"mode"`        // the screen mode outcome: ok, ok-added, failed, no-xrandr
	CoordSpace    string `json:"coord_space"` // physical (X11) or logical (Wayland)
	ScreenType    string `json:"screen_type"` // the session: x11, wayland, or what the guest said
	Hard          *bool  `json:"hard"`        // a tree, toolbar, list or table showing; null without a dump
}

// Drag is a drag's start and end, in frame pixels.
type Drag struct {
	From [2]int `json:"from"`
	To   [2]int `json:"to"`
}

// Rescale notes the sizes a dump's boxes were scaled between.
type Rescale struct {
	From [2]int `json:"from"`
	To   [2]int `json:"to"`
}

// IsClick says whether the shot is a training pair: a click or a drag.
func (l *Line) IsClick() bool { return l.Click != nil || l.Drag != nil }

// wireLine is Line as written: the strings that may be unknown are
// pointers, so they go out as null.
type wireLine struct {
	Shot          string   `json:"shot"`
	ATSPI         *string  `json:"atspi"`
	OCR           *string  `json:"ocr"`
	Click         *[2]int  `json:"click"`
	ClickSource   *string  `json:"click_source"`
	Label         *string  `json:"label"`
	Intent        *string  `json:"intent"`
	Drag          *Drag    `json:"drag"`
	App           *string  `json:"app"`
	Locale        *string  `json:"locale"`
	LocaleRaw     *string  `json:"locale_raw"`
	Theme         *string  `json:"theme"`
	Session       *string  `json:"session"`
	Bench         *string  `json:"bench"`
	Origin        *string  `json:"origin"`
	TS            *string  `json:"ts"`
	Req           *string  `json:"req"`
	VMID          int      `json:"vmid"`
	Node          *string  `json:"node"`
	Agent         *string  `json:"agent"`
	FrameW        int      `json:"frame_w"`
	FrameH        int      `json:"frame_h"`
	GuestW        int      `json:"guest_w"`
	GuestH        int      `json:"guest_h"`
	Rescaled      *Rescale `json:"rescaled"`
	ScreenChanged *bool    `json:"screen_changed"`
	ATSPIWidgets  int      `json:"atspi_widgets"`
	ATSPIError    *string  `json:"atspi_error"`
	OCRError      *string  `json:"ocr_error"`
	Mode          *string  `json:"mode"`
	CoordSpace    *string  `json:"coord_space"`
	ScreenType    *string  `json:"screen_type"`
	Hard          *bool    `json:"hard"`
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MarshalJSON writes every field, an empty string as null.
func (l Line) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireLine{
		Shot: l.Shot, ATSPI: orNull(l.ATSPI), OCR: orNull(l.OCR),
		Click: l.Click, ClickSource: orNull(l.ClickSource), Label: orNull(l.Label), Intent: orNull(l.Intent), Drag: l.Drag,
		App: orNull(l.App), Locale: orNull(l.Locale), LocaleRaw: orNull(l.LocaleRaw), Theme: orNull(l.Theme),
		Session: orNull(l.Session), Bench: orNull(l.Bench), Origin: orNull(l.Origin), TS: orNull(l.TS), Req: orNull(l.Req),
		VMID: l.VMID, Node: orNull(l.Node), Agent: orNull(l.Agent),
		FrameW: l.FrameW, FrameH: l.FrameH, GuestW: l.GuestW, GuestH: l.GuestH, Rescaled: l.Rescaled,
		ScreenChanged: l.ScreenChanged, ATSPIWidgets: l.ATSPIWidgets, ATSPIError: orNull(l.ATSPIError), OCRError: orNull(l.OCRError),
		Mode: orNull(l.Mode), CoordSpace: orNull(l.CoordSpace), ScreenType: orNull(l.ScreenType), Hard: l.Hard,
	})
}

// IndexEntry is one line of an index as read: its number (from 1), the
// parsed Line, or why it could not be parsed.
type IndexEntry struct {
	N    int
	Line Line
	Err  error
}

// ReadIndex calls fn for every non-blank line of the index at path, in
// order. A line that is not a JSON object with a shot (a hand edit, a
// crash in the middle of an append) comes with Err set; the lines after
// it still count. A missing index reads as empty.
func ReadIndex(path string, fn func(IndexEntry) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		raw, err := r.ReadBytes('\n')
		if len(raw) > 0 && !blank(raw) {
			e := IndexEntry{N: n}
			if perr := json.Unmarshal(raw, &e.Line); perr != nil {
				e.Err = perr
			} else if e.Line.Shot == "" {
				e.Err = errors.New("no shot")
			}
			if ferr := fn(e); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}
