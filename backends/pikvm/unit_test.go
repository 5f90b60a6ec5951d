package pikvm

import (
	"encoding/base32"
	"fmt"
	"strings"
	"testing"
	"time"
)

// RFC 6238's SHA-1 test vectors, cut to kvmd's 6 digits.
func TestTOTPVectors(t *testing.T) {
	key, err := totpKey(base32.StdEncoding.EncodeToString([]byte("12345678901234567890")))
	if err != nil {
		t.Fatal(err)
	}
	for unix, want := range map[int64]string{59: "287082", 1111111109: "081804", 1111111111: "050471", 1234567890: "005924", 2000000000: "279037", 20000000000: "353130"} {
		if got := totpCode(key, time.Unix(unix, 0)); got != want {
			t.Errorf("T=%d: %s, want %s", unix, got, want)
		}
	}
	if _, err := totpKey("not base32!"); err == nil {
		t.Error("a secret that is not base32 was accepted")
	}
}

func TestParseURL(t *testing.T) {
	for in, want := range map[string]string{
		"pikvm.lan":                  "https://pikvm.lan",
		"https://pikvm.lan/":         "https://pikvm.lan",
		"https://pikvm.lan:8443/api": "https://pikvm.lan:8443",
		"https://proxy/kvm/api/":     "https://proxy/kvm",
	} {
		got, _, err := parseURL(in)
		if err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "http://pikvm", "https://u:p@pikvm", "https://pikvm/?x=1"} {
		if _, _, err := parseURL(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		} else if strings.Contains(err.Error(), "u:p") {
			t.Errorf("%q: the error shows the credentials: %v", bad, err)
		}
	}
}

func TestComboKeys(t *testing.T) {
	for combo, want := range map[string]string{
		"ret":             "[Enter]",
		"ctrl-alt-f2":     "[ControlLeft AltLeft F2]",
		"shift-a":         "[ShiftLeft KeyA]",
		"ctrl-alt-delete": "[ControlLeft AltLeft Delete]",
		"alt-sysrq-b":     "[AltLeft PrintScreen KeyB]",
		"esc":             "[Escape]",
		"spc":             "[Space]",
		"backspace":       "[Backspace]",
		"up":              "[ArrowUp]",
		"meta_l-l":        "[MetaLeft KeyL]",
		"kp_enter":        "[NumpadEnter]",
	} {
		got, err := comboKeys(combo)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("%s: %v, %v; want %s", combo, got, err, want)
		}
	}
	for _, bad := range []string{"", "ctrl-", "hyper", "ac_home"} {
		if _, err := comboKeys(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// Pixels map onto kvmd's absolute range as its web UI maps them: the
// first pixel to the minimum, the last to the maximum.
func TestToKVMD(t *testing.T) {
	for _, c := range []struct{ p, size, want int }{{0, 720, -32768}, {719, 720, 32767}, {360, 721, 0}, {5, 1, 0}} {
		if got := toKVMD(c.p, c.size); got != c.want {
			t.Errorf("pixel %d of %d: %d, want %d", c.p, c.size, got, c.want)
		}
	}
}

func TestPrintText(t *testing.T) {
	got, err := printText("a\r\nb\rc\n\tD~")
	if err != nil || string(got) != "a\nb\nc\n\tD~" {
		t.Errorf("%q, %v", string(got), err)
	}
	if _, err := printText("ok ё"); err == nil || strings.Contains(err.Error(), "ё") || !strings.Contains(err.Error(), "nothing was typed") {
		t.Errorf("a Cyrillic letter answered %v", err)
	}
}
