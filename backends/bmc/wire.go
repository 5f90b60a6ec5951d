package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// sessionCallTimeout bounds a login or logout. Neither obeys the
// operation's context: a login abandoned halfway may leave a session on
// the BMC that we never learnt of, and a logout must run after a
// cancellation too.
const sessionCallTimeout = 20 * time.Second

// wire is the transport of one operation. It binds every request to the
// operation's context (gofish sends with context.Background, so bmclib
// calls could not be cancelled otherwise), watches the login and logout
// so the session is known whoever opened it, and keeps the BMC's last
// refusal for the error message.
type wire struct {
	base http.RoundTripper
	ctx  context.Context

	mu      sync.Mutex
	session string // path of the session this operation opened, "" none
	token   string
	last    *refusal
	netErr  error // the latest transport failure (TLS, refused connection)
}

// refusal is an answer of status >= 400, as the BMC worded it.
type refusal struct {
	Method, Path string
	Status       int
	MessageID    string
	Message      string
}

func isSessionsPath(p string) bool {
	return strings.HasSuffix(strings.TrimSuffix(strings.ToLower(p), "/"), "/sessionservice/sessions")
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	path := req.URL.Path
	login := req.Method == http.MethodPost && isSessionsPath(path)
	w.mu.Lock()
	logout := req.Method == http.MethodDelete && w.session != "" && samePath(path, w.session)
	w.mu.Unlock()

	var ctx context.Context
	var cancel context.CancelFunc
	stop := func() bool { return true }
	if login || logout {
		ctx, cancel = context.WithTimeout(context.WithoutCancel(w.ctx), sessionCallTimeout)
	} else {
		ctx, cancel = context.WithCancel(w.ctx)
		// The request's own deadline (bmclib sets the client's timeout)
		// still counts.
		stop = context.AfterFunc(req.Context(), cancel)
	}
	res, err := w.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel()
		w.mu.Lock()
		w.netErr = err
		w.mu.Unlock()
		return nil, err
	}
	res.Body = &releasingBody{ReadCloser: res.Body, release: func() { stop(); cancel() }}
	switch {
	case login && (res.StatusCode == http.StatusCreated || res.StatusCode == http.StatusOK) && res.Header.Get("X-Auth-Token") != "":
		w.mu.Lock()
		w.session, w.token = locationPath(res.Header.Get("Location")), res.Header.Get("X-Auth-Token")
		w.mu.Unlock()
	case logout && (res.StatusCode < 300 || res.StatusCode == http.StatusNotFound):
		w.mu.Lock()
		w.session, w.token = "", ""
		w.mu.Unlock()
	}
	if res.StatusCode >= 400 {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(body))
		r := &refusal{Method: req.Method, Path: path, Status: res.StatusCode}
		r.MessageID, r.Message = redfishMessage(body)
		w.mu.Lock()
		w.last = r
		w.mu.Unlock()
	}
	return res, nil
}

type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// locationPath reduces a Location header to its path, as gofish does.
func locationPath(loc string) string {
	if u, err := url.Parse(loc); err == nil && u.Path != "" {
		return u.Path
	}
	return loc
}

func samePath(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}

// openSession answers the session this operation still holds.
func (w *wire) openSession() (path, token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.session, w.token
}

func (w *wire) lastRefusal() *refusal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *wire) lastNetError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.netErr
}

// logout deletes a session that is still open (bmclib's Close ignores a
// failed DELETE, and a half-failed open has no Close at all).
func (w *wire) logout(ctx context.Context, baseURL string) error {
	path, token := w.openSession()
	if path == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, baseURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Auth-Token", token)
	res, err := w.RoundTrip(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if p, _ := w.openSession(); p != "" {
		return &refusal{Method: http.MethodDelete, Path: path, Status: res.StatusCode}
	}
	return nil
}

func (r *refusal) Error() string {
	msg := r.Message
	if msg == "" {
		msg = http.StatusText(r.Status)
	}
	if r.MessageID != "" {
		msg += " (" + r.MessageID + ")"
	}
	return "the BMC answered " + itoa(r.Status) + " to " + r.Method + " " + r.Path + ": " + msg
}

// redfishMessage reads the most specific message of a Redfish error body:
// the first extended info (where vendors say what happened, iDRAC's
// RAC0218 for one), else the error's own.
func redfishMessage(body []byte) (id, msg string) {
	var doc struct {
		Error struct {
			Code     string `json:"code"`
			Message  string `json:"message"`
			Extended []struct {
				MessageID string `json:"MessageId"`
				Message   string `json:"Message"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return "", strings.TrimSpace(string(bytes.ToValidUTF8(body[:min(len(body), 200)], nil)))
	}
	for _, x := range doc.Error.Extended {
		if x.Message != "" {
			return x.MessageID, x.Message
		}
	}
	return doc.Error.Code, doc.Error.Message
}
