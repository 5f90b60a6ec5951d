package poligon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

// abiVersion is the version of the wire described in runtime/wasm/doc.go;
// the host refuses a module whose manifest envelope carries another.
const abiVersion = 1

// Statuses of a poligon.call answer (the high 32 bits of its result).
const (
	statusOK    = 0 // the buffer holds the call's JSON answer
	statusError = 1 // the buffer holds an error envelope
	statusShort = 2 // the answer did not fit: the low bits are its size
)

// errorBody is the JSON of a failure, in both directions: a host call's
// error envelope and the error of a run or manifest answer.
type errorBody struct {
	Message string `json:"message"`
	Call    string `json:"call,omitempty"`
	Hint    string `json:"hint,omitempty"`
	Ref     int    `json:"ref,omitempty"`   // the host's number for the call's error
	Where   string `json:"where,omitempty"` // "file:line" of a panic
}

// answerEnvelope is what manifest and run answer.
type answerEnvelope struct {
	ABI   int             `json:"abi"`
	Value json.RawMessage `json:"value,omitempty"`
	Error *errorBody      `json:"error,omitempty"`
}

func valueEnvelope(v any) []byte {
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return errorEnvelope(&Error{Message: "the result is not JSON-encodable: " + err.Error()})
		}
	}
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	b, err := json.Marshal(answerEnvelope{ABI: abiVersion, Value: raw})
	if err != nil {
		return errorEnvelope(&Error{Message: "the result is not valid JSON: " + err.Error()})
	}
	return b
}

// errorEnvelope encodes err; a host call's *Error in its chain lends its
// call, hint and ref, so the host can hand back its own error.
func errorEnvelope(err error) []byte {
	body := &errorBody{Message: err.Error()}
	var perr *Error
	if errors.As(err, &perr) {
		body.Call, body.Hint, body.Ref = perr.Call, perr.Hint, perr.ref
	}
	return bodyEnvelope(body)
}

func bodyEnvelope(body *errorBody) []byte {
	b, _ := json.Marshal(answerEnvelope{ABI: abiVersion, Error: body}) // strings and ints: cannot fail
	return b
}

// decodeAnswer turns a poligon.call answer into the answer JSON or an *Error.
func decodeAnswer(name string, status uint32, data []byte) ([]byte, error) {
	switch status {
	case statusOK:
		return data, nil
	case statusError:
		var body errorBody
		if err := json.Unmarshal(data, &body); err != nil {
			return nil, &Error{Call: name, Message: fmt.Sprintf("%s: undecodable error from the host: %v", name, err)}
		}
		if body.Call == "" {
			body.Call = name
		}
		return nil, &Error{Call: body.Call, Message: body.Message, Hint: body.Hint, ref: body.Ref}
	default:
		return nil, &Error{Call: name, Message: fmt.Sprintf("%s: unknown answer status %d from the host", name, status)}
	}
}

// panicBody describes a panic in Run, recovered by the caller of
// panicBody, and prints its stack to stderr, which is the run's log.
func panicBody(p any) *errorBody {
	fmt.Fprintf(os.Stderr, "panic: %v\n%s", p, debug.Stack())
	body := &errorBody{Message: fmt.Sprintf("panic: %v", p)}
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)]) // past Callers, panicBody, the deferred func
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") && f.File != "" {
			body.Where = fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line)
			break
		}
		if !more {
			break
		}
	}
	return body
}
