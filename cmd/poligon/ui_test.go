package main

import (
	"bufio"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/testvm"
)

// poligon ui serves the views on loopback only, and prints a one-time
// login link whose token rides in the fragment (no request line, so no
// log, holds it): the token logs in once, as the config's owner.
func TestUI(t *testing.T) {
	environ := env(t, t.TempDir())
	if _, stderr, code := poligon(t, environ, "ui", "--bind", "0.0.0.0:8812"); code != 2 || !strings.Contains(stderr, "not a loopback address") {
		t.Errorf("ui --bind 0.0.0.0: exit %d, %s", code, stderr)
	}

	cmd := exec.Command(binaryPath, "ui", "--bind", "127.0.0.1:0")
	cmd.Env = environ
	var stderr testvm.SyncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Signal(syscall.SIGTERM)
	link := regexp.MustCompile(`(http://127\.0\.0\.1:\d+/ui/login)#token=([A-Za-z0-9_-]+)`)
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := link.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
		io.Copy(io.Discard, out)
	}()
	var m []string
	select {
	case m = <-found:
	case <-time.After(60 * time.Second):
		t.Fatalf("no login link printed; stderr:\n%s", stderr.String())
	}
	loginURL, token := m[1], m[2]

	login := func() int {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(loginURL)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
		if csrf == nil {
			t.Fatalf("no login form: %s", page)
		}
		resp, err = c.PostForm(loginURL, url.Values{"csrf": {string(csrf[1])}, "token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := login(); code != http.StatusSeeOther {
		t.Errorf("the printed token: %d", code)
	}
	if code := login(); code != http.StatusUnauthorized {
		t.Errorf("the printed token a second time: %d", code)
	}
	if strings.Contains(stderr.String(), token) {
		t.Errorf("the token is in the log: %s", stderr.String())
	}
}
