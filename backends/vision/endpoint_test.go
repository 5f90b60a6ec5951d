package vision

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The table of vision.md §2.2, measured with the Python smart_resize.
func TestSmartResizeTable(t *testing.T) {
	type size struct{ w, h int }
	cases := []struct {
		screen                size
		qwen25, holo15, qwen3 size
	}{
		{size{1280, 800}, size{1288, 812}, size{1260, 784}, size{1280, 800}},
		{size{1024, 768}, size{1036, 756}, size{1036, 756}, size{1024, 768}},
		{size{1920, 1080}, size{1932, 1092}, size{1316, 728}, size{1920, 1088}},
		{size{1280, 720}, size{1288, 728}, size{1288, 728}, size{1280, 704}},
	}
	eps := map[string]Endpoint{
		"qwen25 HF default":  {Resize: ResizeQwen25},
		"qwen25 max 1003520": {Resize: ResizeQwen25, MaxPixels: 1003520},
		"qwen3":              {Resize: ResizeQwen3},
	}
	for _, c := range cases {
		for name, want := range map[string]size{"qwen25 HF default": c.qwen25, "qwen25 max 1003520": c.holo15, "qwen3": c.qwen3} {
			w, h := eps[name].SendSize(c.screen.w, c.screen.h)
			if w != want.w || h != want.h {
				t.Errorf("%s %dx%d: %dx%d, want %dx%d", name, c.screen.w, c.screen.h, w, h, want.w, want.h)
			}
		}
		if w, h := (Endpoint{Resize: ResizeNone}).SendSize(c.screen.w, c.screen.h); w != c.screen.w || h != c.screen.h {
			t.Errorf("none %dx%d: %dx%d", c.screen.w, c.screen.h, w, h)
		}
	}
	// Below min_pixels the image grows to it.
	if w, h := (Endpoint{Resize: ResizeQwen3}).SendSize(100, 100); w*h < 64*32*32 || w%32 != 0 || h%32 != 0 {
		t.Errorf("qwen3 100x100: %dx%d, want >= 65536 pixels in multiples of 32", w, h)
	}
	if _, _, err := smartResize(1000, 4, 28, 3136, 12845056); err == nil {
		t.Error("aspect 250:1 accepted")
	}
}

func TestCheck(t *testing.T) {
	good := Endpoint{Purpose: PurposeVision, URL: "https://ai.example.org/v1/chat/completions", Model: "holo2-4b", Key: testKey}
	if err := good.Check(); err != nil {
		t.Fatalf("good endpoint: %v", err)
	}
	cases := []struct {
		edit func(*Endpoint)
		want string
	}{
		{func(e *Endpoint) { e.URL = "ftp://ai.example.org/x" }, `URL scheme "ftp"`},
		{func(e *Endpoint) { e.URL = "" }, "URL is empty"},
		{func(e *Endpoint) { e.URL = "https:///v1" }, "no host"},
		{func(e *Endpoint) { e.URL = "https://bob:hunter2@ai.example.org/v1" }, "carries credentials"},
		{func(e *Endpoint) { e.Coords = "ratio" }, `coords "ratio": want pixels or permille`},
		{func(e *Endpoint) { e.Resize = "qwen2" }, `resize "qwen2"`},
		{func(e *Endpoint) { e.MaxPixels = 1000000 }, "max_pixels needs resize"},
		{func(e *Endpoint) { e.Resize, e.MaxPixels = ResizeQwen3, 100 }, "below the qwen3 min_pixels"},
		{func(e *Endpoint) { e.Options = json.RawMessage(`[1,2]`) }, "options must be a JSON object"},
		{func(e *Endpoint) { e.Options = json.RawMessage(`{"temperature":`) }, "options must be a JSON object"},
		{func(e *Endpoint) { e.Options = json.RawMessage(`"x"`) }, "options must be a JSON object"},
		{func(e *Endpoint) { e.Options = json.RawMessage(`{"stream":true}`) }, "may not set stream"},
		{func(e *Endpoint) { e.Purpose = "painter" }, `purpose "painter"`},
		{func(e *Endpoint) { e.Model = " " }, "model is empty"},
		{func(e *Endpoint) { e.Key = testKey + "\n" }, "key contains"},
		{func(e *Endpoint) { e.Timeout = -time.Second }, "timeout is negative"},
	}
	for _, c := range cases {
		e := good
		c.edit(&e)
		err := e.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", e, err, c.want)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, testKey) || strings.Contains(msg, "hunter2") || strings.Contains(msg, "example.org") {
			t.Errorf("error quotes the key or the URL: %s", msg)
		}
	}
	// All problems at once.
	e := good
	e.Coords, e.Resize = "x", "y"
	if err := e.Check(); err == nil || !strings.Contains(err.Error(), "coords") || !strings.Contains(err.Error(), "resize") {
		t.Errorf("two problems: %v", err)
	}
	if _, err := New(Endpoint{Purpose: PurposeVision}, Options{}); err == nil {
		t.Error("New accepted an endpoint without URL and model")
	}
}

// The body: defaults, the options merged over them, model and messages last.
func TestRequestBody(t *testing.T) {
	srv := newServer(t)
	frame, _ := uiFrame(640, 400)
	check := func(ep Endpoint, want map[string]any) {
		t.Helper()
		srv.Reply(reply("10\t10\tbutton\tOK\n"))
		c := testClient(t, srv, ep, Options{})
		if _, err := c.Elements(t.Context(), frame); err != nil {
			t.Fatal(err)
		}
		r := srv.Last()
		if r.Err != "" {
			t.Fatalf("the server could not decode the request: %s", r.Err)
		}
		for k, v := range want {
			got, _ := json.Marshal(r.Body[k])
			exp, _ := json.Marshal(v)
			if string(got) != string(exp) {
				t.Errorf("body %s = %s, want %s", k, got, exp)
			}
		}
		if r.Model != c.ep.Model || r.Auth != "Bearer "+testKey || r.Detail != "high" || r.ContentType != "application/json" || r.Method != "POST" {
			t.Errorf("request: model %q auth %q detail %q type %q method %s", r.Model, r.Auth, r.Detail, r.ContentType, r.Method)
		}
	}
	check(Endpoint{}, map[string]any{
		"temperature": 0.1, "repetition_penalty": 1.05, "max_tokens": 2000,
		"chat_template_kwargs": map[string]any{"enable_thinking": false, "thinking": false},
	})
	check(Endpoint{Purpose: PurposeGrounding}, map[string]any{"temperature": 0, "max_tokens": 256, "repetition_penalty": nil})
	check(Endpoint{MaxTokens: 900, Options: json.RawMessage(`{"top_p":0.9,"max_tokens":3000,"model":"evil","messages":[],"chat_template_kwargs":{"thinking":true}}`)},
		map[string]any{"top_p": 0.9, "max_tokens": 3000, "temperature": nil, "chat_template_kwargs": map[string]any{"thinking": true}})
	if srv.Last().Model != "holo2-4b" {
		t.Errorf("options overrode the model: %q", srv.Last().Model)
	}
	check(Endpoint{Options: json.RawMessage(`{"max_completion_tokens":500}`)}, map[string]any{"max_completion_tokens": 500, "max_tokens": nil})
	// No key: no Authorization header at all.
	c, err := New(Endpoint{Purpose: PurposeVision, URL: srv.ChatURL(), Model: "m"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Reply(reply(""))
	if _, err := c.Elements(t.Context(), frame); err != nil {
		t.Fatal(err)
	}
	if a := srv.Last().Auth; a != "" {
		t.Errorf("Authorization without a key: %q", a)
	}
}
