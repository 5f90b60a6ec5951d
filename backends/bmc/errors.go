package bmc

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	bmclibErrs "github.com/bmc-toolbox/bmclib/v2/errors"
	"github.com/stmcginnis/gofish/common"

	"github.com/poligon/poligon/backends"
)

// Errors a BMC's refusals wrap, besides backends.ErrBusy.
var (
	// ErrAuth: the BMC refused the user name or password.
	ErrAuth = errors.New("the BMC refused the credentials")
	// ErrSessionLimit: every session the BMC allows is taken.
	ErrSessionLimit = errors.New("the BMC's sessions are all taken")
	// ErrPasswordChange: the account must change its password first.
	ErrPasswordChange = errors.New("the BMC requires a password change")
	// ErrTLS: the BMC's certificate was not trusted.
	ErrTLS = errors.New("the BMC's certificate is not trusted")
)

// Hints of the BMC's refusals.
const (
	hintAuth = "the BMC refused the bench's user name or password: the operator checks the credentials configured for this bench " +
		"(a wrong password repeated may lock the BMC account)"
	hintSessionLimit = "the BMC's sessions are all taken (left open by other tools or a crashed client): they expire after the BMC's " +
		"session timeout, often 30 minutes; an operator can close them in the BMC's web UI, or reset the BMC (ipmitool mc reset cold)"
	hintPasswordChange = "the BMC still has its factory password and refuses everything until it is changed: the operator changes it " +
		"(the BMC's web UI, or PATCH its AccountService account) and updates the bench's credentials"
	hintBusy         = "the BMC is busy with another action (a power transition, a firmware job): wait a few seconds and try again"
	hintPrecondition = "the BMC's resource changed between reading and writing it (ETag): try again"
	hintUnreachable  = "the BMC did not answer: check that it is up and that this host reaches its management network"
	hintImage        = "the BMC could not use the image: it fetches the image itself, so the BMC (not poligon) must reach " +
		"that URL, without redirects, over a protocol it supports"
)

// Error is a failed BMC operation. It unwraps to the cause and to the
// sentinel errors the BMC's answer implies.
type Error struct {
	Bench string // the backend's Kind
	Op    string // "power reset", "media mount", ...
	// Asked is the ResetType a power operation asked the BMC for, when it
	// got that far.
	Asked string
	// Refusal is the BMC's answer that failed the operation, when one did.
	Refusal *refusal
	Err     error
	hint    string
	is      []error
}

func (e *Error) Error() string {
	cause := ""
	switch {
	case e.Refusal != nil:
		cause = e.Refusal.Error()
	case e.Err != nil:
		cause = e.Err.Error()
	}
	return e.head() + cause
}

// head is what the error says before its cause: where, what, and what
// the BMC was asked.
func (e *Error) head() string {
	h := e.Bench + ": " + e.Op + ": "
	if e.Asked != "" {
		h += "asked the BMC for " + e.Asked + "; "
	}
	return h
}

// asked marks the error of a power request with the ResetType it asked
// for: bmclib words it as its own function ("power cycle failed" for a
// ForceRestart).
type asked struct {
	resetType string
	err       error
}

func (a *asked) Error() string { return a.err.Error() }
func (a *asked) Unwrap() error { return a.err }

func (e *Error) Unwrap() []error {
	out := append([]error{}, e.is...)
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// Hint says what to do about it (backends.Hinted).
func (e *Error) Hint() string { return e.hint }

var _ backends.Hinted = (*Error)(nil)

// classify builds the Error for err, which an operation met after the BMC
// answered with last (nil when it refused nothing).
func (b *Bench) classify(ctx context.Context, op string, err error, last *refusal, netErr error, secrets ...string) error {
	if err == nil {
		return nil
	}
	e := &Error{Bench: b.Kind(), Op: op}
	var a *asked
	if errors.As(err, &a) {
		e.Asked = a.resetType
	}
	var ce *common.Error
	var re *refusal
	switch {
	case errors.As(err, &re):
		e.Refusal = re
	case errors.As(err, &ce) && ce.HTTPReturnedStatusCode >= 400:
		if last != nil && last.Status == ce.HTTPReturnedStatusCode {
			e.Refusal = last
		} else {
			r := &refusal{Status: ce.HTTPReturnedStatusCode, Method: "a", Path: "request", Message: ce.Message}
			if len(ce.ExtendedInfos) > 0 && ce.ExtendedInfos[0].Message != "" {
				r.MessageID, r.Message = ce.ExtendedInfos[0].MessageID, ce.ExtendedInfos[0].Message
			}
			e.Refusal = r
		}
	case ctx.Err() != nil:
		e.Err = fmt.Errorf("%w", ctx.Err())
		return b.scrubbed(secrets, e)
	case netErr != nil && tlsProblem(netErr) != nil:
		return b.scrubbed(secrets, b.tlsError(e, netErr))
	case netErr != nil && isDialError(netErr):
		e.Err = fmt.Errorf("%s: %v", b.ep.url, netErr)
		e.hint = hintUnreachable
		return b.scrubbed(secrets, e)
	case netErr != nil && e.Asked != "":
		// The request went out; the BMC may have acted on it.
		e.Err = fmt.Errorf("no answer came (%v)", netErr)
		e.hint = "the BMC may have acted before its answer was lost: read the power state (action status) before repeating the action, " +
			"which would be done twice"
		return b.scrubbed(secrets, e)
	case errors.Is(err, bmclibErrs.ErrIncompatibleProvider):
		e.Err = fmt.Errorf("the BMC does not say it is a %s (bmclib: %v)", b.d.name, cleanBmclib(err))
		e.hint = "the operator sets the bench's dialect to the BMC's vendor (redfish suits any Redfish BMC)"
		return b.scrubbed(secrets, e)
	case last != nil && strings.Contains(err.Error(), strconv.Itoa(last.Status)):
		// bmclib flattened the BMC's answer into text; the wire kept it.
		e.Refusal = last
	default:
		e.Err = cleanBmclib(err)
	}
	if e.Refusal != nil {
		e.Err = err
		b.refusalMeaning(e)
	}
	if e.hint == "" {
		e.hint = backends.HintOf(err)
	}
	return b.scrubbed(secrets, e)
}

// refusalMeaning sets the sentinels and hint a refusal implies.
func (b *Bench) refusalMeaning(e *Error) {
	r := e.Refusal
	id := strings.ToLower(r.MessageID)
	msg := strings.ToLower(r.Message)
	switch {
	case strings.Contains(id, "passwordchangerequired"):
		e.is, e.hint = []error{ErrPasswordChange}, hintPasswordChange
	case strings.Contains(id, "sessionlimit") || strings.Contains(id, "rac0218") ||
		(strings.Contains(msg, "maximum number") && strings.Contains(msg, "session")):
		e.is, e.hint = []error{ErrSessionLimit}, hintSessionLimit
	case r.Status == 401 && isSessionsPath(r.Path), r.Status == 401 && b.cfg.BasicAuth:
		e.is, e.hint = []error{ErrAuth}, hintAuth
	case r.Status == 409, strings.Contains(id, "resourceinuse"):
		e.is, e.hint = []error{backends.ErrBusy}, hintBusy
	case r.Status == 412:
		e.hint = hintPrecondition
	case r.Status == 400 && strings.HasSuffix(r.Path, "InsertMedia"):
		e.hint = hintImage
	case r.Status == 404:
		e.is = []error{backends.ErrNotFound}
	case r.Status == 503:
		e.is, e.hint = []error{backends.ErrBusy}, hintBusy
	}
}

func (b *Bench) tlsError(e *Error, err error) *Error {
	e.is = []error{ErrTLS}
	var pin *PinError
	if errors.As(err, &pin) {
		e.Err = pin
		e.hint = "the BMC presented another certificate than the pinned one: it was replaced, or something sits between us and the BMC; " +
			"the operator checks the BMC's certificate on the BMC itself before changing the pin"
		return e
	}
	e.Err = fmt.Errorf("%s (trusting %s)", tlsProblem(err), b.trust)
	got := ""
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) && len(verr.UnverifiedCertificates) > 0 {
		sum := sha256.Sum256(verr.UnverifiedCertificates[0].Raw)
		got = " (the certificate it presents has SHA-256 " + hex.EncodeToString(sum[:]) + ": compare it with the one the BMC's own console shows before trusting it)"
	}
	e.hint = "the BMC's certificate is not trusted: the operator sets ca_file to a CA that signed it, or pins it with pin_sha256, " +
		"which BMCs' self-signed certificates for their vendor's name need" + got
	return e
}

func tlsProblem(err error) error {
	var verr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var pin *PinError
	switch {
	case errors.As(err, &pin):
		return pin
	case errors.As(err, &verr):
		return verr.Err
	case errors.As(err, &unknown):
		return unknown
	case errors.As(err, &host):
		return host
	case errors.As(err, &invalid):
		return invalid
	}
	return nil
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// cleanBmclib shortens bmclib's aggregated errors ("1 error occurred:\n\t*
// provider: gofish, ...") to their causes on one line.
func cleanBmclib(err error) error {
	text := err.Error()
	var parts []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		if line == "" || strings.HasSuffix(line, "errors occurred:") || strings.HasSuffix(line, "error occurred:") {
			continue
		}
		parts = append(parts, strings.TrimSpace(line))
	}
	if len(parts) == 0 {
		return err
	}
	return &cleaned{text: strings.Join(parts, "; "), err: err}
}

type cleaned struct {
	text string
	err  error
}

func (c *cleaned) Error() string { return c.text }
func (c *cleaned) Unwrap() error { return c.err }

// scrubbed makes sure no secret reaches the error's text: the BMC or a
// library could echo one back.
func (b *Bench) scrubbed(secrets []string, e *Error) error {
	e.Op = b.scrub(e.Op, secrets...)
	text := e.Error()
	if clean := b.scrub(text, secrets...); clean != text {
		e.Refusal = nil
		e.Err = &cleaned{text: clean[len(e.head()):], err: errors.Join(e.is...)}
	}
	return e
}

// scrub replaces the BMC's password and the given secrets in s.
func (b *Bench) scrub(s string, secrets ...string) string {
	for _, secret := range append([]string{b.cfg.Password}, secrets...) {
		if len(secret) >= 3 {
			s = strings.ReplaceAll(s, secret, "<redacted>")
		}
	}
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }
