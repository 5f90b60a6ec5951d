// Package visiontest is a fake OpenAI-compatible chat/completions endpoint
// for tests of the vision clients and of what is built on them. It records
// every request decoded (model, body fields, the Authorization header, the
// prompts, the size of the PNG it got) and answers scripted replies in order;
// with a Truth it answers like a perfect model that works in the space of the
// image it actually received, so a test proves the client maps back.
package visiontest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/png" // the client sends PNG
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Reply is one scripted answer. The zero Reply is an empty completion.
type Reply struct {
	Content          string
	Reasoning        string          // message.reasoning (vLLM)
	ReasoningContent string          // message.reasoning_content (llama.cpp, DeepSeek, older vLLM)
	Finish           string          // finish_reason; default "stop"
	NoUsage          bool            // leave usage out of the answer
	Usage            *Usage          // nil: an estimate from the image size and the content
	NoChoices        bool            // answer "choices": []
	Status           int             // HTTP status; default 200
	Header           http.Header     // extra response headers (Retry-After, ...)
	Body             string          // sent as is instead of a completion (garbage, an error page, an error JSON)
	Delay            time.Duration   // wait before answering; ends early when the client gives up
	Hold             <-chan struct{} // wait until closed; ends early when the client gives up
	Drop             bool            // close the connection without answering
	Truth            bool            // answer this call from the Truth (Finish, NoUsage, Delay still apply)
}

// Usage is the token counts of an answer.
type Usage struct{ Prompt, Completion int }

// Element is a UI element of the truth, in frame pixels.
type Element struct {
	X, Y  int
	Type  string
	Label string
}

// Truth makes the server answer like a model that sees the elements: an
// element list as x<TAB>y<TAB>type<TAB>label lines, or, for a grounding
// prompt (its text has "Description:"), the point of the element whose label
// is in the prompt (the longest such label), both in Coords of the image the
// server received.
type Truth struct {
	Coords   string // "pixels" (of the image received) | "permille" (0-1000 of it)
	W, H     int    // the size of the frame the elements are placed in
	Elements []Element
	Format   string // the grounding answer, with two %d; default "(%d, %d)"
	Miss     string // the grounding answer when no label matches; default "I cannot find that element."
}

// Request is one request as the server decoded it.
type Request struct {
	Method, Path   string
	Auth           string // the Authorization header as received
	ContentType    string
	Model          string
	Body           map[string]any // the top-level fields except messages (numbers as float64)
	System         string         // the system message
	Text           string         // the user message's text part
	Detail         string         // image_url.detail
	ImageW, ImageH int            // the size of the PNG received
	PNG            []byte
	Messages       []Message // every message in order, with its text parts joined
	Err            string    // what the server could not decode, "" when all went well
}

// Message is one message of a request: its role and its text.
type Message struct{ Role, Text string }

// keep bounds the requests held (a long benchmark makes thousands).
const keep = 256

// Server is the fake endpoint; it answers POST on any path.
type Server struct {
	*httptest.Server

	mu      sync.Mutex
	replies []Reply
	truth   *Truth
	reqs    []Request
	count   int
}

// New starts a server; Close it when done.
func New() *Server {
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// ChatURL is the chat/completions URL of the server.
func (s *Server) ChatURL() string { return s.URL + "/v1/chat/completions" }

// Reply queues answers, used one per request in order.
func (s *Server) Reply(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, r...)
}

// SetTruth makes the server answer from t whenever no reply is queued (nil
// turns it off). Without either, a request gets a 500.
func (s *Server) SetTruth(t *Truth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.truth = t
}

// Requests answers the requests received (the last 256).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Count answers how many requests arrived.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Last answers the last request (the zero Request before any).
func (s *Server) Last() Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return Request{}
	}
	return s.reqs[len(s.reqs)-1]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	req := decode(r)
	s.mu.Lock()
	s.count++
	s.reqs = append(s.reqs, req)
	if len(s.reqs) > keep {
		s.reqs = s.reqs[len(s.reqs)-keep:]
	}
	var rep Reply
	scripted := len(s.replies) > 0
	if scripted {
		rep = s.replies[0]
		s.replies = s.replies[1:]
	}
	truth := s.truth
	s.mu.Unlock()

	if !scripted && truth == nil {
		http.Error(w, `{"error":{"message":"visiontest: no reply scripted"}}`, http.StatusInternalServerError)
		return
	}
	if !scripted {
		rep.Truth = true
	}
	if rep.Delay > 0 {
		select {
		case <-time.After(rep.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if rep.Hold != nil {
		select {
		case <-rep.Hold:
		case <-r.Context().Done():
			return
		}
	}
	if rep.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, v := range rep.Header {
		w.Header()[k] = v
	}
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	if rep.Body != "" || status < 200 || status > 299 {
		w.WriteHeader(status)
		w.Write([]byte(rep.Body))
		return
	}
	content := rep.Content
	if rep.Truth {
		if truth == nil {
			http.Error(w, `{"error":{"message":"visiontest: a Truth reply without a truth"}}`, http.StatusInternalServerError)
			return
		}
		content = truth.answer(req)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(completion(req, rep, content))
}

// completion is the answer's JSON.
func completion(req Request, rep Reply, content string) map[string]any {
	msg := map[string]any{"role": "assistant", "content": content}
	if rep.Reasoning != "" {
		msg["reasoning"] = rep.Reasoning
	}
	if rep.ReasoningContent != "" {
		msg["reasoning_content"] = rep.ReasoningContent
	}
	finish := rep.Finish
	if finish == "" {
		finish = "stop"
	}
	choices := []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}
	if rep.NoChoices {
		choices = []any{}
	}
	out := map[string]any{
		"id": "chatcmpl-visiontest", "object": "chat.completion", "created": time.Now().Unix(),
		"model": req.Model, "choices": choices,
	}
	if !rep.NoUsage {
		u := Usage{Prompt: req.ImageW*req.ImageH/(28*28) + len(req.Text)/4 + len(req.System)/4,
			Completion: max(1, len(content)/4)}
		if rep.Usage != nil {
			u = *rep.Usage
		}
		out["usage"] = map[string]any{"prompt_tokens": u.Prompt, "completion_tokens": u.Completion,
			"total_tokens": u.Prompt + u.Completion}
	}
	return out
}

// answer is what a perfect model working on the received image would say.
func (t *Truth) answer(req Request) string {
	to := func(x, y int) (int, int) {
		if t.Coords == "permille" {
			return round(float64(x) * 1000 / float64(t.W)), round(float64(y) * 1000 / float64(t.H))
		}
		return round(float64(x) * float64(req.ImageW) / float64(t.W)), round(float64(y) * float64(req.ImageH) / float64(t.H))
	}
	if strings.Contains(req.Text, "Description:") {
		best := -1
		for i, e := range t.Elements {
			if e.Label != "" && strings.Contains(req.Text, e.Label) && (best < 0 || len(e.Label) > len(t.Elements[best].Label)) {
				best = i
			}
		}
		if best < 0 {
			if t.Miss != "" {
				return t.Miss
			}
			return "I cannot find that element."
		}
		format := t.Format
		if format == "" {
			format = "(%d, %d)"
		}
		x, y := to(t.Elements[best].X, t.Elements[best].Y)
		return fmt.Sprintf(format, x, y)
	}
	var b strings.Builder
	for _, e := range t.Elements {
		x, y := to(e.X, e.Y)
		fmt.Fprintf(&b, "%d\t%d\t%s\t%s\n", x, y, e.Type, e.Label)
	}
	return b.String()
}

func round(v float64) int { return int(math.Round(v)) }

// decode reads a request the way a strict server would, noting what is wrong.
func decode(r *http.Request) Request {
	req := Request{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization"), ContentType: r.Header.Get("Content-Type")}
	var errs []string
	var body map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		req.Err = "body: " + err.Error()
		return req
	}
	req.Body = map[string]any{}
	for k, v := range body {
		if k == "messages" {
			continue
		}
		var x any
		json.Unmarshal(v, &x)
		req.Body[k] = x
	}
	json.Unmarshal(body["model"], &req.Model)
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(body["messages"], &msgs); err != nil {
		errs = append(errs, "messages: "+err.Error())
	}
	for _, m := range msgs {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			req.Messages = append(req.Messages, Message{m.Role, s})
			if m.Role == "system" {
				req.System = s
			} else {
				req.Text += s
			}
			continue
		}
		var parts []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			ImageURL struct {
				URL    string `json:"url"`
				Detail string `json:"detail"`
			} `json:"image_url"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			errs = append(errs, m.Role+" content: "+err.Error())
			continue
		}
		msg := Message{Role: m.Role}
		for _, p := range parts {
			switch p.Type {
			case "text":
				msg.Text += p.Text
				req.Text += p.Text
			case "image_url":
				req.Detail = p.ImageURL.Detail
				data, ok := strings.CutPrefix(p.ImageURL.URL, "data:image/png;base64,")
				if !ok {
					errs = append(errs, "image_url is not a PNG data URL")
					continue
				}
				png, err := base64.StdEncoding.DecodeString(data)
				if err != nil {
					errs = append(errs, "image base64: "+err.Error())
					continue
				}
				cfg, _, err := image.DecodeConfig(bytes.NewReader(png))
				if err != nil {
					errs = append(errs, "image: "+err.Error())
					continue
				}
				req.PNG, req.ImageW, req.ImageH = png, cfg.Width, cfg.Height
			}
		}
		req.Messages = append(req.Messages, msg)
	}
	req.Err = strings.Join(errs, "; ")
	return req
}
