package vision

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/internal/logs"
)

// maxBody bounds what the client reads of an answer; a chat completion of a
// few thousand tokens is a few tens of KB.
const maxBody = 16 << 20

// Options are the client's collaborators; all may be zero.
type Options struct {
	Log       *slog.Logger // nil: no log
	Events    *Events      // nil: failures are only logged
	CappedDir string       // "": capped frames are not saved
	HTTP      *http.Client // nil: a client with the default transport; the per-call timeout is the endpoint's
}

// Client calls one endpoint. It is safe for concurrent use and never
// retries: the caller decides whether a failure is worth another call.
type Client struct {
	ep        Endpoint
	log       *slog.Logger
	events    *Events
	cappedDir string
	http      *http.Client
	head      []byte // the body's fixed fields, "{...," up to model and messages
	maxTokens int    // the token cap the body sets
	scrub     scrubber

	calls, failed, incomplete, usageMissing, promptTokens, completionTokens, nanos atomic.Int64
}

// Element is one UI element; X, Y is its centre in the pixels of the frame
// passed in (in the frame's own coordinates: a SubImage answers points of
// the image it was cut from).
type Element = backends.Element

// List is the answer of Elements.
type List struct {
	Elements []Element
	Complete bool   // false when capped or unparseable: never cache it, never serve it as complete
	Problem  string // "capped" | "unparseable" | ""
	Call     Call
}

// Call describes one model call, for the caller's answer and metrics.
type Call struct {
	Model                          string
	Status                         int           // HTTP status, 0 when none arrived
	Duration                       time.Duration // the HTTP round trip
	PromptTokens, CompletionTokens int
	UsageMissing                   bool // the endpoint sent no token counts: the zeros are placeholders
	Finish                         string
	SentW, SentH                   int // the size of the image sent
}

// Stats are the client's counters since it was made.
type Stats struct {
	Calls            int64 // calls that went to the endpoint
	Failed           int64 // no usable answer: transport error, non-2xx, a body that is no completion
	Incomplete       int64 // an answer cut at the token cap or unparseable (grounding: no point)
	UsageMissing     int64
	PromptTokens     int64
	CompletionTokens int64
	Total            time.Duration
}

// WithRequest tags ctx with a tool call's correlation id; the client's log
// lines and events carry it as req. It is the engine's own (logs.WithReq):
// a tool call's ctx already carries it.
func WithRequest(ctx context.Context, id string) context.Context {
	return logs.WithReq(ctx, id)
}

func requestID(ctx context.Context) string { return logs.Req(ctx) }

// New checks ep and makes its client.
func New(ep Endpoint, o Options) (*Client, error) {
	if err := ep.Check(); err != nil {
		return nil, err
	}
	ep = ep.withDefaults()
	c := &Client{ep: ep, log: o.Log, events: o.Events, cappedDir: o.CappedDir, http: o.HTTP, scrub: newScrubber(ep.Key)}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.http == nil {
		c.http = &http.Client{}
	}
	fields := map[string]json.RawMessage{
		"max_tokens": json.RawMessage(strconv.Itoa(ep.MaxTokens)),
		// Holo2 and Qwen3 think by default and spend the budget on it; the
		// two templates read different keys, so send both.
		"chat_template_kwargs": json.RawMessage(`{"enable_thinking":false,"thinking":false}`),
	}
	opts, err := optionFields(ep.Options)
	if err != nil {
		return nil, err
	}
	for k, v := range opts {
		fields[k] = v
	}
	delete(fields, "model") // model and messages always win
	delete(fields, "messages")
	if _, ok := opts["max_completion_tokens"]; ok {
		delete(fields, "max_tokens") // OpenAI refuses both at once
	}
	c.maxTokens = ep.MaxTokens
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if n, err := strconv.Atoi(string(bytes.TrimSpace(fields[k]))); err == nil {
			c.maxTokens = n
		}
	}
	var head bytes.Buffer
	head.WriteByte('{')
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		kj, _ := json.Marshal(k)
		var v bytes.Buffer
		if err := json.Compact(&v, fields[k]); err != nil {
			return nil, fmt.Errorf("%s endpoint: options field %s: %v", ep.Purpose, kj, err)
		}
		head.Write(kj)
		head.WriteByte(':')
		head.Write(v.Bytes())
		head.WriteByte(',')
	}
	c.head = head.Bytes()
	return c, nil
}

// Purpose and Model name the endpoint, e.g. for a cache key.
func (c *Client) Purpose() string { return c.ep.Purpose }
func (c *Client) Model() string   { return c.ep.Model }

// MaxTokens is the token cap every request sets: the options' max_tokens
// (or max_completion_tokens), else the purpose's default.
func (c *Client) MaxTokens() int { return c.maxTokens }

// SendSize answers the size a w x h frame is sent at.
func (c *Client) SendSize(w, h int) (int, int) { return c.ep.SendSize(w, h) }

// Stats answers a snapshot of the counters.
func (c *Client) Stats() Stats {
	return Stats{
		Calls: c.calls.Load(), Failed: c.failed.Load(), Incomplete: c.incomplete.Load(),
		UsageMissing: c.usageMissing.Load(), PromptTokens: c.promptTokens.Load(),
		CompletionTokens: c.completionTokens.Load(), Total: time.Duration(c.nanos.Load()),
	}
}

// exchange is one call's request and answer.
type exchange struct {
	call      Call
	frame     *image.RGBA
	sentPNG   []byte // the PNG sent; the frame's own when it was not resized
	resized   bool   // sentPNG is of another size than the frame
	label     string // grounding: the label asked for
	content   string
	reasoning string
	body      []byte // the raw body, kept for samples
}

// answer is the text to parse: the content, or the reasoning when the
// content is empty (a server's reasoning parser can swallow a whole answer
// when the model did not think, vLLM's deepseek_r1 among them).
func (ex *exchange) answer() (text string, fromReasoning bool) {
	if strings.TrimSpace(ex.content) != "" || ex.reasoning == "" {
		return ex.content, false
	}
	return ex.reasoning, true
}

// send resizes and encodes the frame, posts it with the prompts and decodes
// the answer. Every call that reaches the endpoint is counted; a call that got
// no completion is logged, recorded and returned as an *Error.
func (c *Client) send(ctx context.Context, frame *image.RGBA, system string, text func(sw, sh int) string, label string) (*exchange, error) {
	if frame == nil || frame.Bounds().Empty() {
		return nil, fmt.Errorf("%s model: no frame to send", c.ep.Purpose)
	}
	fb := frame.Bounds()
	sw, sh := c.ep.SendSize(fb.Dx(), fb.Dy())
	img, release := sendImage(frame, sw, sh)
	pngBytes, err := encodePNG(img)
	release()
	if err != nil {
		return nil, fmt.Errorf("%s model: encoding the frame: %v", c.ep.Purpose, err)
	}
	ex := &exchange{
		call:  Call{Model: c.ep.Model, SentW: sw, SentH: sh},
		frame: frame, sentPNG: pngBytes, resized: sw != fb.Dx() || sh != fb.Dy(), label: label,
	}
	body := c.body(system, text(sw, sh), pngBytes)
	return ex, c.post(ctx, ex, body)
}

// post sends one request body and decodes the completion into ex. Every
// call that reaches the endpoint is counted; a call that got no completion
// is logged, recorded and returned as an *Error.
func (c *Client) post(ctx context.Context, ex *exchange, body []byte) error {
	cctx, cancel := context.WithTimeout(ctx, c.ep.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, c.ep.URL, bytes.NewReader(body))
	if err != nil { // Check accepted the URL, so this is unexpected; never quote it
		return fmt.Errorf("%s model: cannot make the request: the URL setting is not usable", c.ep.Purpose)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "poligon-vision")
	if c.ep.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.ep.Key)
	}
	c.calls.Add(1)
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		ex.call.Duration = time.Since(start)
		return c.fail(ctx, ex, c.transportError(ctx, err))
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	resp.Body.Close()
	ex.call.Duration = time.Since(start)
	ex.call.Status = resp.StatusCode
	ex.body = raw
	if err != nil {
		return c.fail(ctx, ex, c.transportError(ctx, err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.fail(ctx, ex, c.statusError(resp.StatusCode, http.StatusText(resp.StatusCode), raw, retryAfter(resp.Header.Get("Retry-After"))))
	}
	if len(raw) > maxBody {
		return c.fail(ctx, ex, c.bodyError("too_large", resp.StatusCode, fmt.Sprintf("with more than %d MB", maxBody>>20), ""))
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return c.fail(ctx, ex, c.bodyError("not_json", resp.StatusCode,
			fmt.Sprintf("with a body that is not a JSON chat completion (%d bytes", len(raw)), ": "+c.scrub.head(string(raw), 120)+")"))
	}
	if cr.Usage == nil || (cr.Usage.PromptTokens == nil && cr.Usage.CompletionTokens == nil) {
		ex.call.UsageMissing = true
		c.usageMissing.Add(1)
	} else {
		ex.call.PromptTokens = deref(cr.Usage.PromptTokens)
		ex.call.CompletionTokens = deref(cr.Usage.CompletionTokens)
		c.promptTokens.Add(int64(ex.call.PromptTokens))
		c.completionTokens.Add(int64(ex.call.CompletionTokens))
	}
	if len(cr.Choices) == 0 {
		detail, body := "with no choices", ""
		if msg := errorMessage(cr.Error); msg != "" {
			detail, body = "with an error", ": "+c.scrub.head(msg, 160)
		}
		return c.fail(ctx, ex, c.bodyError("no_choices", resp.StatusCode, detail, body))
	}
	ch := cr.Choices[0]
	ex.call.Finish = deref(ch.FinishReason)
	if m := ch.Message; m != nil {
		ex.content = contentText(m.Content)
		ex.reasoning = deref(m.Reasoning)
		if ex.reasoning == "" {
			ex.reasoning = deref(m.ReasoningContent)
		}
	} else {
		ex.content = deref(ch.Text)
	}
	c.nanos.Add(int64(ex.call.Duration))
	return nil
}

// fail counts, logs and records a call that got no completion.
func (c *Client) fail(ctx context.Context, ex *exchange, e *Error) error {
	c.failed.Add(1)
	c.nanos.Add(int64(ex.call.Duration))
	attrs := []any{
		"purpose", c.ep.Purpose, "model", c.ep.Model, "ms", ex.call.Duration.Milliseconds(),
		"status", ex.call.Status, "category", e.Category, "kind", e.Kind,
	}
	// The line stops where the server's body begins.
	if shown := logs.Cut(e.msg, e); shown.Chars > 0 {
		attrs = append(attrs, "error", shown.Safe, "error_chars", shown.Chars)
	} else {
		attrs = append(attrs, "error", e.msg)
	}
	if id := requestID(ctx); id != "" {
		attrs = append(attrs, "req", id)
	}
	c.log.WarnContext(ctx, "model call failed", attrs...)
	if e.Kind != "canceled" { // the caller gave up: no fault of the model's
		c.record(ctx, ex, e.Category, e.Kind, e.msg)
	}
	return e
}

// logCall writes the call's one info line (and the answer's head at debug).
func (c *Client) logCall(ctx context.Context, ex *exchange, extra ...any) {
	attrs := []any{
		"purpose", c.ep.Purpose, "model", c.ep.Model, "ms", ex.call.Duration.Milliseconds(),
		"status", ex.call.Status, "prompt_tokens", ex.call.PromptTokens, "completion_tokens", ex.call.CompletionTokens,
		"usage", !ex.call.UsageMissing, "finish", ex.call.Finish,
		"frame", fmt.Sprintf("%dx%d", ex.frame.Bounds().Dx(), ex.frame.Bounds().Dy()),
		"sent", fmt.Sprintf("%dx%d", ex.call.SentW, ex.call.SentH),
	}
	if id := requestID(ctx); id != "" {
		attrs = append(attrs, "req", id)
	}
	c.log.InfoContext(ctx, "model", append(attrs, extra...)...)
	if c.log.Enabled(ctx, slog.LevelDebug) {
		text, _ := ex.answer()
		c.log.DebugContext(ctx, "model answer", "purpose", c.ep.Purpose, "answer", c.scrub.head(text, 600))
	}
}

// body writes the request: the fixed fields, then model and messages. The
// PNG goes straight into the buffer as base64, with no string in between.
func (c *Client) body(system, text string, pngBytes []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(c.head) + base64.StdEncoding.EncodedLen(len(pngBytes)) + len(system) + len(text) + 512)
	b.Write(c.head)
	b.WriteString(`"model":`)
	writeJSONString(&b, c.ep.Model)
	b.WriteString(`,"messages":[{"role":"system","content":`)
	writeJSONString(&b, system)
	b.WriteString(`},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,`)
	enc := base64.NewEncoder(base64.StdEncoding, &b)
	enc.Write(pngBytes)
	enc.Close()
	b.WriteString(`","detail":"high"}},{"type":"text","text":`)
	writeJSONString(&b, text)
	b.WriteString(`}]}]}`)
	return b.Bytes()
}

func writeJSONString(b *bytes.Buffer, s string) {
	j, _ := json.Marshal(s) // a string always marshals
	b.Write(j)
}

// chatResponse is what the client reads of a chat completion.
type chatResponse struct {
	Choices []struct {
		Message *struct {
			Content          json.RawMessage `json:"content"` // a string, null, or an array of parts
			Reasoning        *string         `json:"reasoning"`
			ReasoningContent *string         `json:"reasoning_content"`
		} `json:"message"`
		Text         *string `json:"text"` // the legacy completions shape some proxies answer with
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     *int `json:"prompt_tokens"`
		CompletionTokens *int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

// contentText reads message.content: a string, or text parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "output_text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// errorMessage reads an error object a proxy answers 200 with.
func errorMessage(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Message != "" {
		return e.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t).Round(time.Second); d > 0 {
			return d
		}
	}
	return 0
}

// Elements asks the vision model for the frame's UI elements. A capped or
// unparseable answer is no error: it comes back with Complete false and
// whatever complete lines it had. An error means no usable answer came.
func (c *Client) Elements(ctx context.Context, frame *image.RGBA) (List, error) {
	ex, err := c.send(ctx, frame, listSystemPrompt, func(sw, sh int) string { return listPrompt(c.ep.Coords, sw, sh) }, "")
	if err != nil {
		var call Call
		if ex != nil {
			call = ex.call
		}
		return List{Call: call}, err
	}
	text, fromReasoning := ex.answer()
	capped := ex.call.Finish == "length"
	var p parsed
	if !(capped && fromReasoning) { // thoughts cut at the cap hold no list
		p = parseList(text, capped, c.mapper(frame, ex.call.SentW, ex.call.SentH))
	}
	l := List{Elements: p.elements, Complete: true, Call: ex.call}
	switch {
	case capped:
		l.Complete, l.Problem = false, CategoryCapped
	case p.unparseable(text) || ex.call.Finish == "content_filter":
		l.Complete, l.Problem = false, CategoryUnparseable
	}
	extra := []any{"elements", len(l.Elements)}
	if l.Problem != "" {
		extra = append(extra, "problem", l.Problem, "malformed", p.malformed)
	}
	if p.repeated > 0 {
		extra = append(extra, "repeated", p.repeated)
	}
	c.logCall(ctx, ex, extra...)
	if l.Problem != "" {
		c.incomplete.Add(1)
		c.record(ctx, ex, l.Problem, "", "")
		if l.Problem == CategoryCapped {
			c.saveCapped(ctx, ex)
		}
	}
	return l, nil
}

// Ground asks the grounding model where the element labelled label is (kind,
// e.g. "icon" or "button", narrows it; "" for any) and answers the point in
// frame pixels. No point, or one outside the image, is an *Error.
func (c *Client) Ground(ctx context.Context, frame *image.RGBA, label, kind string) (image.Point, Call, error) {
	label, kind = cleanText(label, maxLabel), cleanText(kind, 40)
	if label == "" {
		return image.Point{}, Call{}, fmt.Errorf("%s model: no label to look for", c.ep.Purpose)
	}
	ex, err := c.send(ctx, frame, groundSystemPrompt, func(sw, sh int) string { return groundPrompt(label, kind, c.ep.Coords, sw, sh) }, label)
	if err != nil {
		var call Call
		if ex != nil {
			call = ex.call
		}
		return image.Point{}, call, err
	}
	text, fromReasoning := ex.answer()
	capped := ex.call.Finish == "length"
	var (
		pt    image.Point
		found bool
		e     *Error
	)
	if !(capped && fromReasoning) {
		var x, y float64
		x, y, found = parsePoint(text, fromReasoning, capped)
		if found {
			var ok bool
			pt, ok = c.mapper(frame, ex.call.SentW, ex.call.SentH).point(x, y)
			if !ok {
				e = &Error{Category: CategoryNoPoint, Kind: "outside",
					msg:  fmt.Sprintf("%s model answered a point outside the image (%g, %g in %s of %dx%d)", c.ep.Purpose, x, y, c.ep.Coords, ex.call.SentW, ex.call.SentH),
					hint: "the model's coordinates do not fit this image: check the endpoint's coords and resize settings, or click by coordinates from a screenshot"}
			}
		}
	}
	switch {
	case e != nil:
	case !found && capped:
		e = &Error{Category: CategoryCapped, Kind: "length",
			msg:  fmt.Sprintf("%s model ran out of tokens (max_tokens %d) before it named a point", c.ep.Purpose, c.maxTokens),
			hint: "the model spent its budget thinking: raise max_tokens in the options, or disable thinking"}
	case !found:
		e = &Error{Category: CategoryNoPoint, Kind: "no_point",
			msg:  fmt.Sprintf("%s model named no point for %q (%d characters of answer)", c.ep.Purpose, label, utf8.RuneCountInString(text)),
			hint: "take a screenshot and check the label is on screen, or click by coordinates"}
	}
	if e != nil {
		c.logCall(ctx, ex, "problem", e.Category, "label_chars", utf8.RuneCountInString(label))
		c.incomplete.Add(1)
		c.record(ctx, ex, e.Category, e.Kind, e.msg)
		return image.Point{}, ex.call, e
	}
	c.logCall(ctx, ex, "x", pt.X, "y", pt.Y, "label_chars", utf8.RuneCountInString(label))
	return pt, ex.call, nil
}
