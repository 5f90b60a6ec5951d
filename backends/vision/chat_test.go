package vision

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends/vision/visiontest"
)

func plannerClient(t *testing.T, srv *visiontest.Server, ep Endpoint, o Options) *Client {
	t.Helper()
	ep.Purpose = PurposePlanner
	if ep.Model == "" {
		ep.Model = "qwen3.8-27b"
	}
	return testClient(t, srv, ep, o)
}

var chatMsgs = []Message{{"system", "You write plans."}, {"user", "a goal"}, {"assistant", "{bad"}, {"user", "fix it"}}

// The conversation goes out in order as plain strings; the planner's
// defaults fill the body, options override them, model and messages win.
func TestChatBody(t *testing.T) {
	srv := newServer(t)
	srv.Reply(reply(`{"name":"a"}`), reply("x"))
	c := plannerClient(t, srv, Endpoint{}, Options{})
	r, err := c.Chat(t.Context(), chatMsgs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != `{"name":"a"}` || r.FinishReason != "stop" {
		t.Errorf("reply %+v", r)
	}
	req := srv.Last()
	if req.Err != "" {
		t.Fatalf("server could not decode: %s", req.Err)
	}
	if len(req.Messages) != 4 {
		t.Fatalf("messages %+v", req.Messages)
	}
	for i, m := range chatMsgs {
		if req.Messages[i].Role != m.Role || req.Messages[i].Text != m.Content {
			t.Errorf("message %d: %+v, want %+v", i, req.Messages[i], m)
		}
	}
	if req.Body["temperature"] != 0.1 || req.Body["max_tokens"] != 3000.0 || req.Auth != "Bearer "+testKey {
		t.Errorf("default body %v auth %q", req.Body, req.Auth)
	}

	c = plannerClient(t, srv, Endpoint{Model: "m1", Options: json.RawMessage(`{"model":"evil","messages":[],"temperature":0,"top_p":0.5}`)}, Options{})
	if _, err := c.Chat(t.Context(), chatMsgs[:2]); err != nil {
		t.Fatal(err)
	}
	req = srv.Last()
	if req.Model != "m1" || len(req.Messages) != 2 || req.Body["temperature"] != 0.0 || req.Body["top_p"] != 0.5 {
		t.Errorf("options not merged under model and messages: model %q, %d messages, body %v", req.Model, len(req.Messages), req.Body)
	}
	if _, err := c.Chat(t.Context(), nil); err == nil {
		t.Error("no messages: no error")
	}
}

// Reasoning stays apart from the answer, even when the content is empty; a
// missing usage is zeros, not an error; a cut reply is no error.
func TestChatReplyFields(t *testing.T) {
	srv := newServer(t)
	srv.Reply(
		visiontest.Reply{Content: "", ReasoningContent: `I think {"name":"x"}`, Usage: &visiontest.Usage{Prompt: 100, Completion: 7}},
		visiontest.Reply{Content: "answer", Reasoning: "hmm", NoUsage: true},
		visiontest.Reply{Content: `{"name":"cut`, Finish: "length"},
	)
	c := plannerClient(t, srv, Endpoint{}, Options{})
	r, err := c.Chat(t.Context(), chatMsgs[:2])
	if err != nil || r.Text != "" || r.Reasoning != `I think {"name":"x"}` || r.PromptTokens != 100 || r.CompletionTokens != 7 {
		t.Errorf("reasoning_content: %+v %v", r, err)
	}
	r, err = c.Chat(t.Context(), chatMsgs[:2])
	if err != nil || r.Text != "answer" || r.Reasoning != "hmm" || !r.UsageMissing || r.PromptTokens != 0 {
		t.Errorf("no usage: %+v %v", r, err)
	}
	r, err = c.Chat(t.Context(), chatMsgs[:2])
	if err != nil || r.FinishReason != "length" || r.Text != `{"name":"cut` {
		t.Errorf("cut: %+v %v", r, err)
	}
	if st := c.Stats(); st.Calls != 3 || st.Incomplete != 1 || st.UsageMissing != 1 || st.PromptTokens < 100 {
		t.Errorf("stats %+v", st)
	}
}

// One info line per call with purpose, seq and tokens; failures are
// *Errors with hints; the key is in neither, even when the body echoes it.
func TestChatLogAndErrors(t *testing.T) {
	srv := newServer(t)
	var logs logBuffer
	c := plannerClient(t, srv, Endpoint{}, Options{Log: logs.logger()})
	srv.Reply(visiontest.Reply{Content: "ok " + testKey, Usage: &visiontest.Usage{Prompt: 12, Completion: 3}})
	if _, err := c.Chat(WithRequest(WithSeq(t.Context(), 2), "abc-1"), chatMsgs[:2]); err != nil {
		t.Fatal(err)
	}
	srv.Reply(visiontest.Reply{Status: 401, Body: `{"error":"bad key Bearer ` + testKey + `"}`})
	_, err := c.Chat(t.Context(), chatMsgs[:2])
	var ve *Error
	if !errors.As(err, &ve) || ve.Status != 401 || !strings.Contains(ve.Hint(), "key") {
		t.Fatalf("401: %v", err)
	}
	if strings.Contains(err.Error(), testKey) || strings.Contains(ve.Hint(), testKey) {
		t.Errorf("the error quotes the key: %v", err)
	}
	out := logs.String()
	for _, want := range []string{"msg=model purpose=planner model=qwen3.8-27b", "prompt_tokens=12 completion_tokens=3 usage=true finish=stop",
		"req=abc-1 seq=2", "model call failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, testKey) {
		t.Errorf("the key is in the log:\n%s", out)
	}
}

// A capped text-only call is recorded as an event with a JSON sample and
// no frame (there is none to save).
func TestChatEvent(t *testing.T) {
	srv := newServer(t)
	dir := t.TempDir()
	ev, err := OpenEvents(dir, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	c := plannerClient(t, srv, Endpoint{}, Options{Events: ev})
	srv.Reply(visiontest.Reply{Content: `{"name":`, Finish: "length"})
	if _, err := c.Chat(t.Context(), chatMsgs[:2]); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, eventsFile))
	if err != nil {
		t.Fatal(err)
	}
	var e event
	if err := json.Unmarshal(b, &e); err != nil || e.Kind != "planner" || e.Category != CategoryCapped || e.SamplePNG != "" || e.SampleJSON == "" {
		t.Fatalf("event %s (%v)", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, e.SampleJSON)); err != nil {
		t.Error(err)
	}
}
