package visiontest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, s *Server, text string, img image.Image) (int, map[string]any) {
	t.Helper()
	var b bytes.Buffer
	png.Encode(&b, img)
	body, _ := json.Marshal(map[string]any{
		"model": "m", "temperature": 0,
		"messages": []any{
			map[string]any{"role": "system", "content": "sys"},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes()), "detail": "high"}},
				map[string]any{"type": "text", "text": text},
			}},
		},
	})
	req, _ := http.NewRequest("POST", s.ChatURL(), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func content(out map[string]any) string {
	return out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
}

func TestServer(t *testing.T) {
	s := New()
	defer s.Close()
	img := image.NewRGBA(image.Rect(0, 0, 200, 100))
	if st, _ := post(t, s, "list", img); st != 500 {
		t.Errorf("no reply scripted: %d, want 500", st)
	}
	r := s.Last()
	if r.Err != "" || r.ImageW != 200 || r.ImageH != 100 || r.Auth != "Bearer k" || r.System != "sys" || r.Text != "list" || r.Detail != "high" || r.Model != "m" || r.Body["temperature"] != 0.0 || r.Body["messages"] != nil {
		t.Errorf("decoded %+v", r)
	}
	s.Reply(Reply{Content: "hi", Reasoning: "r", Finish: "length", NoUsage: true})
	_, out := post(t, s, "x", img)
	msg := out["choices"].([]any)[0].(map[string]any)
	if content(out) != "hi" || msg["finish_reason"] != "length" || msg["message"].(map[string]any)["reasoning"] != "r" || out["usage"] != nil {
		t.Errorf("scripted answer %v", out)
	}

	// The truth, in the space of the image received: a 200x100 image of a
	// 400x200 frame halves pixels; permille is of the image.
	els := []Element{{X: 100, Y: 50, Type: "button", Label: "Save"}, {X: 300, Y: 150, Type: "button", Label: "Save As"}}
	s.SetTruth(&Truth{Coords: "pixels", W: 400, H: 200, Elements: els})
	if _, out := post(t, s, "list them", img); content(out) != "50\t25\tbutton\tSave\n150\t75\tbutton\tSave As\n" {
		t.Errorf("truth list %q", content(out))
	}
	if _, out := post(t, s, `Description: the element labelled "Save As"`, img); content(out) != "(150, 75)" {
		t.Errorf("truth point %q", content(out))
	}
	s.SetTruth(&Truth{Coords: "permille", W: 400, H: 200, Elements: els, Format: "Click(%d, %d)", Miss: "none"})
	if _, out := post(t, s, `Description: the element labelled "Save"`, img); content(out) != "Click(250, 250)" {
		t.Errorf("truth point %q", content(out))
	}
	if _, out := post(t, s, `Description: the element labelled "Open"`, img); content(out) != "none" {
		t.Errorf("truth miss %q", content(out))
	}
	if s.Count() != 6 || len(s.Requests()) != 6 || !strings.Contains(s.Requests()[5].Text, "Open") {
		t.Errorf("count %d", s.Count())
	}
}
