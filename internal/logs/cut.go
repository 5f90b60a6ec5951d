package logs

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Payloaded is an error whose text ends in a payload — guest output, a
// model's answer, a server's body — that can carry a password or a key:
// Error()[:SafeLen()] says what failed, the rest is the payload. Logs and
// the audit log keep the first part only; the model still reads it all.
type Payloaded interface {
	error
	SafeLen() int
}

// MaxError is how many characters of an error a log line keeps at most.
const MaxError = 300

// Cutting is the loggable part of an error text.
type Cutting struct {
	Safe    string // what may be logged
	Chars   int    // how many characters were cut (error_chars)
	Payload bool   // the cut is at a payload (not only at MaxError)
}

// Text is the cut text as an audit record or a trace step keeps it: what
// may be logged, and a mark where something was cut.
func (c Cutting) Text() string {
	switch {
	case c.Payload:
		return c.Safe + " (output left out)"
	case c.Chars > 0:
		return c.Safe + "..."
	}
	return c.Safe
}

// Cut answers the part of msg (an error text, perhaps with more around
// it, "error: step 2 failed: ...") that may be logged. err, when given, is
// the error behind msg: a Payloaded in its chain says exactly where its
// payload begins. A text with no error behind it is cut where guest output
// begins (`stdout "`, `stderr "`). Cutting at N characters alone would not
// do: a secret at the front of the payload would still be logged.
func Cut(msg string, err error) Cutting {
	safe, payload := msg, false
	if i, ok := payloadAt(msg, err); ok {
		safe, payload = msg[:i], true
	}
	if r := []rune(safe); len(r) > MaxError {
		safe = string(r[:MaxError])
	}
	return Cutting{Safe: safe, Chars: utf8.RuneCountInString(msg) - utf8.RuneCountInString(safe), Payload: payload}
}

// guestOutput opens guest output in texts with no error behind them (a
// tool that answered an error result itself, an error from another
// process).
var guestOutput = []string{", stdout \"", ": stdout \"", " stderr \""}

func payloadAt(msg string, err error) (int, bool) {
	var p Payloaded
	if err != nil && errors.As(err, &p) {
		full := p.Error()
		n := min(max(p.SafeLen(), 0), len(full))
		if i := strings.Index(msg, full); i >= 0 {
			return i + n, true
		}
		if i := strings.Index(msg, full[:n]); n > 0 && i >= 0 {
			return i + n, true
		}
		// Reworded on the way up (a secret scrubbed): the text rule below.
	}
	at := -1
	for _, m := range guestOutput {
		if i := strings.Index(msg, m); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at >= 0 {
		return at, true
	}
	if p != nil {
		return 0, true // a payload that cannot be found: none of it is safe
	}
	return 0, false
}
