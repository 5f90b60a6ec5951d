package pikvm

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
)

// A wrong password is kvmd's 403, missing credentials its 401: each a
// clear error with a hint, with no secret in it, and nothing done.
func TestAuthRefusals(t *testing.T) {
	vm, _ := machine(t)
	srv := startFake(t, fakeOpts(vm))
	ctx := testContext(t)

	wrong := newBench(t, srv, func(c *Config) { c.Password = testPassword + "-wrong" })
	err := wrong.Power(ctx, backends.PowerOff)
	text := seen(err)
	var ae *APIError
	if !errors.Is(err, ErrForbidden) || !errors.As(err, &ae) || ae.Status != 403 || ae.Class != "ForbiddenError" {
		t.Fatalf("a wrong password answered %v, want 403 ForbiddenError", text)
	}
	if h := backends.HintOf(err); !strings.Contains(h, "password") || !strings.Contains(h, `"admin"`) {
		t.Errorf("the hint %q does not point at the user's password", h)
	}
	noSecrets(t, text)
	if _, err := wrong.Console(ctx, 0); !errors.Is(err, ErrForbidden) {
		t.Errorf("the stream with a wrong password answered %v, want 403", seen(err))
	}
	if running, _ := vm.Running(ctx); !running {
		t.Fatal("a refused power off turned the machine off")
	}

	none := newBench(t, srv, func(c *Config) { c.User, c.Password = "", "" })
	_, err = none.PowerState(ctx)
	text = seen(err)
	if !errors.Is(err, ErrUnauthorized) || !errors.As(err, &ae) || ae.Status != 401 || ae.Class != "UnauthorizedError" {
		t.Fatalf("no credentials answered %v, want 401 UnauthorizedError", text)
	}
	if h := backends.HintOf(err); !strings.Contains(h, "no kvmd user") {
		t.Errorf("the hint %q does not say credentials are missing", h)
	}
}

// With 2FA on, the current TOTP code is appended to the password: the bench
// with the secret gets in; without it kvmd refuses it, and the hint names
// 2FA.
func TestTOTP(t *testing.T) {
	vm, _ := machine(t)
	opts := fakeOpts(vm)
	opts.TOTPSecret = testTOTP
	srv := startFake(t, opts)
	ctx := testContext(t)

	b := newBench(t, srv, func(c *Config) { c.TOTPSecret = strings.ToLower(testTOTP[:8]) + " " + testTOTP[8:] })
	if st, err := b.PowerState(ctx); err != nil || st != "on" {
		t.Fatalf("with the TOTP secret: %q, %v", st, seen(err))
	}
	if _, _, err := screenOf(t, b).Frame(ctx); err != nil {
		t.Fatal(seen(err))
	}
	h := http.Header{}
	b.authHeaders(h)
	code, _ := totpKey(testTOTP)
	if got := h.Get("X-KVMD-Passwd"); got != testPassword+totpCode(code, time.Now()) && got != testPassword+totpCode(code, time.Now().Add(-30*time.Second)) {
		t.Errorf("X-KVMD-Passwd is not the password with the current code appended")
	}

	plain := newBench(t, srv, nil)
	_, err := plain.PowerState(ctx)
	text := seen(err)
	if !errors.Is(err, ErrForbidden) || !strings.Contains(backends.HintOf(err), "2FA") {
		t.Fatalf("without the TOTP secret: %v, want 403 with a hint about 2FA", text)
	}
	noSecrets(t, text)
}

// TLS is verified: by the CA file, or by the pinned certificate alone; a
// pin that does not match is refused with both fingerprints named; with
// neither the self-signed certificate is not trusted. Never skipped.
func TestTLS(t *testing.T) {
	vm, _ := machine(t)
	srv := startFake(t, fakeOpts(vm))
	ctx := testContext(t)
	fp := srv.Fingerprint()
	colons := func(hexs string) string {
		var parts []string
		for i := 0; i < len(hexs); i += 2 {
			parts = append(parts, hexs[i:i+2])
		}
		return strings.Join(parts, ":")
	}

	pinned := newBench(t, srv, func(c *Config) { c.CAFile, c.PinSHA256 = "", strings.ToUpper(colons(fp)) })
	if _, err := pinned.PowerState(ctx); err != nil {
		t.Fatalf("the right pin: %v", seen(err))
	}
	if _, _, err := screenOf(t, pinned).Frame(ctx); err != nil {
		t.Fatalf("the right pin, websocket and snapshot: %v", seen(err))
	}
	both := newBench(t, srv, func(c *Config) { c.PinSHA256 = fp })
	if _, err := both.PowerState(ctx); err != nil {
		t.Fatalf("CA file and pin: %v", seen(err))
	}

	wrongPin := strings.Repeat("ab", 32)
	for name, edit := range map[string]func(*Config){
		"pin only":    func(c *Config) { c.CAFile, c.PinSHA256 = "", wrongPin },
		"CA and pin":  func(c *Config) { c.PinSHA256 = wrongPin },
		"the console": func(c *Config) { c.CAFile, c.PinSHA256 = "", wrongPin },
	} {
		b := newBench(t, srv, edit)
		var err error
		if name == "the console" {
			_, err = b.Console(ctx, 0)
		} else {
			err = b.Power(ctx, backends.PowerOff)
		}
		text := seen(err)
		var pe *PinError
		if !errors.As(err, &pe) {
			t.Fatalf("%s: a wrong pin answered %v, want a PinError", name, text)
		}
		if !strings.Contains(text, "pinned ab:ab:ab:ab") || !strings.Contains(text, "presented "+colons(fp[:16])) || backends.HintOf(err) == "" {
			t.Errorf("%s: the mismatch %q does not name both fingerprints' first bytes (or has no hint)", name, text)
		}
	}
	if running, _ := vm.Running(ctx); !running {
		t.Fatal("a refused power off turned the machine off")
	}

	untrusted := newBench(t, srv, func(c *Config) { c.CAFile = "" })
	_, err := untrusted.PowerState(ctx)
	text := seen(err)
	if err == nil || !strings.Contains(text, "not trusted") || !strings.Contains(text, colons(fp[:16])) || !strings.Contains(backends.HintOf(err), "ca_file") {
		t.Fatalf("a self-signed certificate without CA or pin answered %v", text)
	}

	for _, bad := range []string{"abc", strings.Repeat("zz", 32)} {
		if _, err := New(Config{URL: srv.URL(), PinSHA256: bad}); err == nil {
			t.Errorf("pin %q was accepted", bad)
		}
	}
	if _, err := New(Config{URL: "http://" + strings.TrimPrefix(srv.URL(), "https://")}); err == nil {
		t.Error("a plain http URL was accepted")
	}
	if _, err := New(Config{URL: "https://admin:" + testPassword + "@pikvm"}); err == nil || strings.Contains(seen(err), testPassword) {
		t.Errorf("a URL with credentials answered %v", err)
	}
}
