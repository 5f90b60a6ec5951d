package kvmdtest

import (
	"encoding/base32"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func keysOf(text string) string {
	var parts []string
	for _, e := range textToKeys([]rune(text)) {
		parts = append(parts, fmt.Sprintf("%s%s", map[bool]string{true: "+", false: "-"}[e.down], e.code))
	}
	return strings.Join(parts, " ")
}

// hid/print as kvmd's printer types on en-us: Shift held across a run of
// shifted characters, typographic punctuation folded, the rest dropped.
func TestPrintKeys(t *testing.T) {
	for text, want := range map[string]string{
		"Hi!\n": "+ShiftLeft +KeyH -KeyH -ShiftLeft +KeyI -KeyI +ShiftLeft +Digit1 -Digit1 -ShiftLeft +Enter -Enter",
		"AB":    "+ShiftLeft +KeyA -KeyA +KeyB -KeyB -ShiftLeft",
		"é€\r":  "",
		"—’":    "+Minus -Minus +Minus -Minus +Quote -Quote",
		"a\tb ": "+KeyA -KeyA +Tab -Tab +KeyB -KeyB +Space -Space",
	} {
		if got := keysOf(text); got != want {
			t.Errorf("%q: %s\nwant %s", text, got, want)
		}
	}
}

// print cuts the text at limit (1024 unless given; 0 is no limit).
func TestPrintLimit(t *testing.T) {
	for query, want := range map[string]int{"": 1024, "?limit=0": 2000, "?limit=10": 10} {
		h := &hid{events: make(chan []any, 10000)}
		r := httptest.NewRequest("POST", "/api/hid/print"+query, strings.NewReader(strings.Repeat("a", 2000)))
		if _, err := h.print(httptest.NewRecorder(), r); err != nil {
			t.Fatal(err)
		}
		if got := len(h.events) / 2; got != want {
			t.Errorf("print%s typed %d characters, want %d", query, got, want)
		}
	}
	h := &hid{events: make(chan []any, 10)}
	r := httptest.NewRequest("POST", "/api/hid/print?delay=6", strings.NewReader("a"))
	var ke *kvmdError
	if _, err := h.print(httptest.NewRecorder(), r); !errors.As(err, &ke) || ke.status != 400 || ke.class != "ValidatorError" {
		t.Errorf("delay=6 answered %v, want 400 ValidatorError", err)
	}
}

// The envelope is kvmd's: ok follows the status, keys sorted, errors as
// {"error", "error_msg"}.
func TestEnvelope(t *testing.T) {
	w := httptest.NewRecorder()
	writeError(w, errMsdConnected)
	want := "{\n    \"ok\": false,\n    \"result\": {\n        \"error\": \"MsdConnectedError\",\n        \"error_msg\": \"MSD is connected to Server, but shouldn't for this operation\"\n    }\n}"
	if w.Code != 400 || w.Body.String() != want {
		t.Errorf("%d %s", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	writeJSON(w, 200, nil)
	if w.Body.String() != "{\n    \"ok\": true,\n    \"result\": {}\n}" {
		t.Errorf("%s", w.Body.String())
	}
	if err := validatorError("x'y", "MSD image name"); err.Error() != `ValidatorError: The argument "x'y" is not a valid MSD image name` {
		t.Errorf("%v", err)
	}
}

func TestValidImageName(t *testing.T) {
	for in, want := range map[string]string{"a.iso": "a.iso", "/dir//b.img/": "dir/b.img", " c.iso ": "c.iso"} {
		if got, err := validImageName(in, false); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "/", "../x", "a/./b", "x\x01"} {
		if _, err := validImageName(bad, false); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if got, err := validImageName("", true); err != nil || got != "" {
		t.Errorf("eject: %q %v", got, err)
	}
}

func TestTOTPWindow(t *testing.T) {
	secret := base32.StdEncoding.EncodeToString([]byte("12345678901234567890"))
	code, err := totpAt(secret, time.Unix(59, 0))
	if err != nil || code != "287082" {
		t.Fatalf("RFC 6238 at 59: %s %v", code, err)
	}
	if !totpVerify(secret, code, time.Unix(59+30, 0)) || totpVerify(secret, code, time.Unix(59+61, 0)) {
		t.Error("the code is not valid within one step either side only")
	}
}
