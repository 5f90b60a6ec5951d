package vision

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

const eventsFile = "model-events.jsonl"

// Events records model failures as JSON lines in <dir>/model-events.jsonl
// (POLIGON_MCP_EVENTS): numbers and lengths only, no text, URL, key or
// pixels, so the file holds no screen content. With samples it also keeps
// the text (error_head, label, reason) and writes the frame and the raw
// answer under <dir>/samples/, which do hold screen content. Recording is best
// effort: a call never fails because its failure could not be written. One
// Events may serve several clients; a nil *Events records nothing.
type Events struct {
	dir      string
	samples  bool
	max      int64
	boot     string
	seq      atomic.Int64
	recorded atomic.Int64

	mu   sync.Mutex
	f    *os.File
	size int64
}

// OpenEvents opens (creating) dir's event file, rotated to one .1
// generation past maxMB (64 when <= 0).
func OpenEvents(dir string, samples bool, maxMB int) (*Events, error) {
	if dir == "" {
		return nil, fmt.Errorf("model events: no directory given")
	}
	if maxMB <= 0 {
		maxMB = 64
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("model events: %w", err)
	}
	if samples {
		if err := os.MkdirAll(filepath.Join(dir, "samples"), 0o700); err != nil {
			return nil, fmt.Errorf("model events: %w", err)
		}
	}
	var rnd [3]byte
	rand.Read(rnd[:])
	e := &Events{
		dir: dir, samples: samples, max: int64(maxMB) << 20,
		// ids are unique per run and across processes sharing dir: the boot
		// second and a random suffix, then a sequence number.
		boot: strconv.FormatInt(time.Now().Unix(), 36) + hex.EncodeToString(rnd[:]),
	}
	if err := e.open(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Events) open() error {
	f, err := os.OpenFile(filepath.Join(e.dir, eventsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("model events: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("model events: %w", err)
	}
	e.f, e.size = f, st.Size()
	return nil
}

// Recorded answers how many events were written since the start.
func (e *Events) Recorded() int64 {
	if e == nil {
		return 0
	}
	return e.recorded.Load()
}

// Close closes the file; later events are dropped.
func (e *Events) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	err := e.f.Close()
	e.f = nil
	return err
}

// event is one line of the file.
type event struct {
	TS               string `json:"ts"`
	ID               string `json:"id"`
	Req              string `json:"req,omitempty"`
	Kind             string `json:"kind"` // the endpoint's purpose
	Category         string `json:"category"`
	Model            string `json:"model"`
	Status           int    `json:"status"`
	MS               int64  `json:"ms"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	Usage            bool   `json:"usage"`
	Finish           string `json:"finish,omitempty"`
	FrameW           int    `json:"frame_w"`
	FrameH           int    `json:"frame_h"`
	SentW            int    `json:"sent_w"`
	SentH            int    `json:"sent_h"`
	ErrorKind        string `json:"error_kind,omitempty"`
	AnswerChars      int    `json:"answer_chars"`
	BodyChars        int    `json:"body_chars"`
	LabelChars       int    `json:"label_chars"`
	ReasonChars      int    `json:"reason_chars"`

	// Only with samples: screen text, and where the sample files are.
	ErrorHead  string `json:"error_head,omitempty"`
	Error      string `json:"error,omitempty"`
	Label      string `json:"label,omitempty"`
	Reason     string `json:"reason,omitempty"`
	SamplePNG  string `json:"sample_png,omitempty"`
	SampleJSON string `json:"sample_json,omitempty"`
}

// sample is samples/<id>.json: the raw answer, for annotation and replay.
type sample struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Category  string `json:"category"`
	Model     string `json:"model"`
	Status    int    `json:"status"`
	Finish    string `json:"finish,omitempty"`
	Coords    string `json:"coords"`
	FrameW    int    `json:"frame_w"`
	FrameH    int    `json:"frame_h"`
	SentW     int    `json:"sent_w"`
	SentH     int    `json:"sent_h"`
	Label     string `json:"label,omitempty"`
	Content   string `json:"content"`
	Reasoning string `json:"reasoning,omitempty"`
	Body      string `json:"body"` // the HTTP body as received, key scrubbed
}

// record writes one failure; a write error is logged, never returned.
func (c *Client) record(ctx context.Context, ex *exchange, category, kind, errText string) {
	e := c.events
	if e == nil || ex == nil {
		return
	}
	var fb image.Rectangle // a text-only call (the planner) has no frame
	if ex.frame != nil {
		fb = ex.frame.Bounds()
	}
	ev := event{
		TS: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), ID: fmt.Sprintf("%s-%d", e.boot, e.seq.Add(1)),
		Req: requestID(ctx), Kind: c.ep.Purpose, Category: category, Model: c.ep.Model,
		Status: ex.call.Status, MS: ex.call.Duration.Milliseconds(),
		PromptTokens: ex.call.PromptTokens, CompletionTokens: ex.call.CompletionTokens, Usage: !ex.call.UsageMissing,
		Finish: ex.call.Finish, FrameW: fb.Dx(), FrameH: fb.Dy(), SentW: ex.call.SentW, SentH: ex.call.SentH,
		ErrorKind: kind, AnswerChars: utf8.RuneCountInString(ex.content), BodyChars: utf8.RuneCount(ex.body),
		LabelChars: utf8.RuneCountInString(ex.label), ReasonChars: utf8.RuneCountInString(ex.reasoning),
	}
	var files func() error
	if e.samples {
		if category == CategoryHTTP {
			ev.ErrorHead = c.scrub.head(string(ex.body), 300)
		}
		ev.Error = c.scrub.clean(errText)
		ev.Label = ex.label
		ev.Reason = c.scrub.head(ex.reasoning, 600)
		if ex.frame != nil {
			ev.SamplePNG = filepath.Join("samples", ev.ID+".png")
		}
		ev.SampleJSON = filepath.Join("samples", ev.ID+".json")
		files = func() error {
			if ex.frame != nil {
				png, err := c.framePNG(ex)
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(e.dir, ev.SamplePNG), png, 0o600); err != nil {
					return err
				}
			}
			s, _ := json.MarshalIndent(sample{
				ID: ev.ID, Kind: ev.Kind, Category: category, Model: ev.Model, Status: ev.Status, Finish: ev.Finish,
				Coords: c.ep.Coords, FrameW: ev.FrameW, FrameH: ev.FrameH, SentW: ev.SentW, SentH: ev.SentH,
				Label: ex.label, Content: c.scrub.clean(ex.content), Reasoning: c.scrub.clean(ex.reasoning),
				Body: c.scrub.clean(string(ex.body)),
			}, "", " ")
			return os.WriteFile(filepath.Join(e.dir, ev.SampleJSON), s, 0o600)
		}
	}
	if err := e.write(&ev, files); err != nil {
		c.log.WarnContext(ctx, "model event not recorded", "purpose", c.ep.Purpose, "error", err)
	}
}

// write appends ev, after its sample files (ev drops its pointers to them
// when they could not be written).
func (e *Events) write(ev *event, files func() error) error {
	var ferr error
	if files != nil {
		if ferr = files(); ferr != nil {
			ev.SamplePNG, ev.SampleJSON = "", ""
		}
	}
	line, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return fmt.Errorf("model events: closed")
	}
	if e.size > 0 && e.size+int64(len(line)) > e.max {
		if err := e.rotate(); err != nil {
			return err
		}
	}
	n, err := e.f.Write(line)
	e.size += int64(n)
	if err != nil {
		return fmt.Errorf("model events: %w", err)
	}
	e.recorded.Add(1)
	if ferr != nil {
		return fmt.Errorf("model events: sample of %s: %w", ev.ID, ferr)
	}
	return nil
}

// rotate keeps one generation: the file becomes .1, replacing the old one.
func (e *Events) rotate() error {
	e.f.Close()
	e.f = nil
	p := filepath.Join(e.dir, eventsFile)
	if err := os.Rename(p, p+".1"); err != nil {
		// Could not rotate: reopen and keep appending rather than lose events.
		if oerr := e.open(); oerr != nil {
			return oerr
		}
		return fmt.Errorf("model events: rotating: %w", err)
	}
	return e.open()
}

// framePNG is the frame as PNG: the bytes sent when it was sent at its size.
func (c *Client) framePNG(ex *exchange) ([]byte, error) {
	if !ex.resized {
		return ex.sentPNG, nil
	}
	return encodePNG(ex.frame)
}

// saveCapped keeps a frame the model could not finish, with the partial
// answer beside it, so the screens that trip a model can be replayed.
func (c *Client) saveCapped(ctx context.Context, ex *exchange) {
	if c.cappedDir == "" {
		return
	}
	err := func() error {
		if err := os.MkdirAll(c.cappedDir, 0o700); err != nil {
			return err
		}
		png, err := c.framePNG(ex)
		if err != nil {
			return err
		}
		base := filepath.Join(c.cappedDir, strconv.FormatInt(time.Now().UnixNano(), 10))
		text, _ := ex.answer()
		if err := os.WriteFile(base+".png", png, 0o600); err != nil {
			return err
		}
		return os.WriteFile(base+".txt", []byte(c.scrub.clean(text)), 0o600)
	}()
	if err != nil {
		c.log.WarnContext(ctx, "capped frame not saved", "purpose", c.ep.Purpose, "error", err)
	}
}
