package web

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/app"
)

// httpEnv is a door over the in-memory backend, for the rules a browser
// need not drive: headers, the Host guard, login refusals.
func httpEnv(t *testing.T, wo Options) *liveEnv {
	t.Helper()
	be := backendtest.New("")
	return newEnv(t, testConfig(t, t.TempDir()), app.Options{OpenBench: func(config.Bench, *slog.Logger) (app.Bench, error) {
		return fakeBench{be}, nil
	}}, wo)
}

// client is a browser-like HTTP client: a cookie jar, no redirects
// followed.
func client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// formLogin posts the login form with the given fields (the form's own
// CSRF token added unless csrf is false).
func formLogin(t *testing.T, c *http.Client, base string, fields url.Values, csrf bool) (*http.Response, string) {
	t.Helper()
	_, page := get(t, c, base+"/ui/login")
	if csrf {
		m := csrfField.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("the login page has no CSRF field: %s", page)
		}
		fields.Set("csrf", m[1])
	}
	resp, err := c.PostForm(base+"/ui/login", fields)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestEveryAnswerIsGuarded(t *testing.T) {
	e := httpEnv(t, Options{})
	c := client(t)
	if resp, _ := formLogin(t, c, e.url, url.Values{"token": {aliceToken}}, true); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s", resp.Status)
	}
	for _, path := range []string{"/ui/login", "/ui/", "/ui/stands", "/ui/benches", "/ui/vm/local/999", "/ui/nothing", "/ui/static/app.js"} {
		resp, _ := get(t, c, e.url+path)
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
			strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
		// A DNS-rebinding page names another host: refused before anything.
		req, _ := http.NewRequest("GET", e.url+path, nil)
		req.Host = "evil.example.com"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("%s with Host evil.example.com: %s", path, resp.Status)
		}
	}
	// The pages' scripts and styles are files: no inline script or style
	// for the policy to allow.
	for _, path := range []string{"/ui/", "/ui/stands", "/ui/benches", "/ui/login"} {
		_, page := get(t, c, e.url+path)
		if regexp.MustCompile(`<script>|<style|style="|\son[a-z]+="`).MatchString(page) {
			t.Errorf("%s has inline script or style", path)
		}
	}
}

func TestLoginRefusals(t *testing.T) {
	e := httpEnv(t, Options{})
	c := client(t)
	const wrong = "not-a-token-of-this-server-0123"
	resp, page := formLogin(t, c, e.url, url.Values{"token": {wrong}}, true)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "not valid") || strings.Contains(page, wrong) {
		t.Errorf("a wrong token: %s %q", resp.Status, page)
	}
	resp, _ = formLogin(t, c, e.url, url.Values{"token": {aliceToken}}, false)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a login without the form's CSRF token: %s", resp.Status)
	}
	if resp, _ := get(t, c, e.url+"/ui/api/vms"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after refused logins: %s", resp.Status)
	}
	// A login never keeps the session id it came with.
	_, _ = get(t, c, e.url+"/ui/login")
	u, _ := url.Parse(e.url + "/ui/")
	before := c.Jar.Cookies(u)
	resp, _ = formLogin(t, c, e.url, url.Values{"token": {aliceToken}}, true)
	if resp.StatusCode != http.StatusSeeOther || len(before) != 1 || c.Jar.Cookies(u)[0].Value == before[0].Value {
		t.Errorf("login: %s, cookie %v then %v", resp.Status, before, c.Jar.Cookies(u))
	}
	if strings.Contains(e.logs.String(), wrong) || strings.Contains(e.logs.String(), aliceToken) {
		t.Error("a token is in the log")
	}
}

// poligon ui's one-time token logs in as the local owner, once.
func TestOneTimeLogin(t *testing.T) {
	const once = "one-time-0123456789"
	e := httpEnv(t, Options{LoginToken: once})
	c := client(t)
	if resp, _ := formLogin(t, c, e.url, url.Values{"token": {once}}, true); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the one-time token: %s", resp.Status)
	}
	if resp, body := get(t, c, e.url+"/ui/"); resp.StatusCode != http.StatusOK || !strings.Contains(body, `<span class="who">alice</span>`) {
		t.Errorf("after the one-time login: %s", resp.Status)
	}
	if resp, _ := formLogin(t, client(t), e.url, url.Values{"token": {once}}, true); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the one-time token again: %s", resp.Status)
	}
}

// Opening the login form again and again keeps a bounded number of
// sessions, and never ends a logged-in one; a form's session lives minutes,
// a login's the configured time.
func TestLoginFormsAreBounded(t *testing.T) {
	ss := newSessions(12 * time.Hour)
	ss.maxForms = 5
	r := httptest.NewRequest("GET", "/ui/login", nil)
	in := ss.start(httptest.NewRecorder(), r, nil, &app.Who{ID: "alice"})
	for range 50 {
		form := ss.start(httptest.NewRecorder(), r, nil, nil)
		if time.Until(form.expires) > loginTTL {
			t.Fatalf("a login form's session lives %s", time.Until(form.expires))
		}
	}
	if n := len(ss.m); n != 6 {
		t.Fatalf("%d sessions after 50 login forms, want 5 forms and the logged-in one", n)
	}
	if ss.m[in.id] != in || time.Until(in.expires) < 11*time.Hour {
		t.Fatal("the logged-in session went, or lives too short")
	}
}
