package vision

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/poligon/poligon/backends"
)

// Error categories (the event categories of the manual).
const (
	CategoryTransport   = "transport"   // no HTTP answer: connect, DNS, TLS, timeout, reset
	CategoryHTTP        = "http_error"  // a non-2xx status, or a 2xx body that is no chat completion
	CategoryCapped      = "capped"      // the answer was cut at the token cap
	CategoryUnparseable = "unparseable" // an answer the client could not read
	CategoryNoPoint     = "no_point"    // a grounding answer with no point, or one outside the image
)

// Error is a failed model call, worded for the model that reads it. Its text
// never holds the key, the URL or more than a short scrubbed head of a body.
type Error struct {
	Category   string        // one of the Category* constants
	Kind       string        // finer: connect, dns, tls, timeout, canceled, reset, request, status, not_json, no_choices, too_large, outside, ...
	Status     int           // HTTP status, 0 when none arrived
	RetryAfter time.Duration // from a 429/503 Retry-After header; the client never retries itself
	msg        string
	safe       int // msg[:safe] is ours; the rest a server's body or a model's answer (0: all ours)
	hint       string
	err        error // the cause, for errors.Is (context.Canceled, DeadlineExceeded)
}

func (e *Error) Error() string { return e.msg }

// SafeLen marks where the text of a server's body begins (logs.Payloaded):
// a log line stops there, since a body can echo the request back.
func (e *Error) SafeLen() int {
	if e.safe == 0 {
		return len(e.msg)
	}
	return e.safe
}

// Hint says what to do about it (backends.Hinted).
func (e *Error) Hint() string  { return e.hint }
func (e *Error) Unwrap() error { return e.err }

// Is makes a grounding answer without a point backends.ErrNoPoint.
func (e *Error) Is(target error) bool {
	return target == backends.ErrNoPoint && e.Category == CategoryNoPoint
}

// scrubber removes the key from text that may echo the request.
type scrubber struct{ forms []string }

func newScrubber(key string) scrubber {
	if len(key) < 4 { // shorter "keys" are placeholders ("x"); replacing them would shred text
		return scrubber{}
	}
	forms := []string{key}
	for _, f := range []string{url.QueryEscape(key), strings.Trim(fmt.Sprintf("%q", key), `"`)} {
		if f != key {
			forms = append(forms, f)
		}
	}
	return scrubber{forms}
}

func (s scrubber) clean(t string) string {
	for _, f := range s.forms {
		t = strings.ReplaceAll(t, f, "[key]")
	}
	return t
}

// head is a short, one-line, scrubbed start of t: enough to recognise an
// error page, not enough to leak what a body echoed back. Scrubbing comes
// before cutting, so a key at the cut cannot leave a prefix behind.
func (s scrubber) head(t string, n int) string {
	t = s.clean(t)
	var b strings.Builder
	space := false
	for _, r := range t {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if n == 0 {
			b.WriteString("…")
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
			if n--; n == 0 {
				b.WriteString("…")
				break
			}
		}
		b.WriteRune(r)
		n--
	}
	return b.String()
}

// transportError words an error from http.Client.Do.
func (c *Client) transportError(parent context.Context, err error) *Error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL, which may carry a secret
	}
	kind, hint := "request", "the model endpoint did not answer: check that it is up and the URL setting"
	var dns *net.DNSError
	var op *net.OpError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var verify *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	switch {
	case parent.Err() != nil:
		kind, hint = "canceled", "the call was cancelled before the model answered"
		err = parent.Err()
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		kind, hint = "timeout", fmt.Sprintf("the model took longer than %s: try again, or raise the endpoint's timeout", c.ep.Timeout)
		err = fmt.Errorf("no answer within %s: %w", c.ep.Timeout, context.DeadlineExceeded)
	case errors.As(err, &dns):
		kind, hint = "dns", "the endpoint's host name does not resolve: check the URL setting"
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &verify), errors.As(err, &rec):
		kind, hint = "tls", "TLS with the endpoint failed: check its certificate and the trusted CAs (SSL_CERT_FILE / SSL_CERT_DIR), or http vs https"
	case errors.As(err, &op) && op.Op == "dial":
		kind, hint = "connect", "the endpoint refused or dropped the connection: check that the model server is up and the URL's host and port"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		kind, hint = "reset", "the endpoint closed the connection mid-call: it may have crashed or hit a proxy limit; try again"
	}
	return &Error{
		Category: CategoryTransport, Kind: kind,
		msg:  fmt.Sprintf("%s model call failed (%s): %s", c.ep.Purpose, kind, c.scrub.head(err.Error(), 300)),
		hint: hint, err: err,
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// statusError words a non-2xx answer.
func (c *Client) statusError(status int, statusText string, body []byte, retryAfter time.Duration) *Error {
	var hint string
	switch {
	case status == 401 || status == 403:
		hint = "the endpoint refused the key: check the key configured for this model endpoint"
	case status == 404:
		hint = "check the URL (the full .../chat/completions URL) and the model name"
	case status == 429:
		hint = "the endpoint is rate limiting; wait and call again"
		if retryAfter > 0 {
			hint = fmt.Sprintf("the endpoint is rate limiting; wait %s and call again", retryAfter)
		}
	case status == 400 || status == 413 || status == 422:
		hint = "the endpoint refused the request: an option it does not accept, a model without image input, or an image too large (check options, resize and max_pixels)"
	case status >= 500:
		hint = "the model server failed; try again later"
	default:
		hint = "the endpoint did not answer with a chat completion; check the URL setting"
	}
	msg := fmt.Sprintf("%s model answered HTTP %d %s", c.ep.Purpose, status, statusText)
	if retryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s; the client does not retry)", retryAfter)
	}
	safe := len(msg)
	if h := c.scrub.head(string(body), 160); h != "" {
		msg += ": " + h
	}
	return &Error{Category: CategoryHTTP, Kind: "status", Status: status, RetryAfter: retryAfter, msg: msg, safe: safe, hint: hint}
}

// bodyError words a 2xx answer that is no chat completion: detail is
// ours, body (perhaps "") the head of what the server sent.
func (c *Client) bodyError(kind string, status int, detail, body string) *Error {
	hint := "the endpoint answered something that is not a chat completion: check that the URL is the chat/completions API, not a web page"
	if kind == "no_choices" {
		hint = "the endpoint answered without a completion: check the model name and the server's log"
	}
	msg := fmt.Sprintf("%s model answered HTTP %d but %s", c.ep.Purpose, status, detail)
	return &Error{Category: CategoryHTTP, Kind: kind, Status: status, msg: msg + body, safe: len(msg), hint: hint}
}
