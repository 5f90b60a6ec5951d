package hostapi

import (
	"errors"
	"fmt"

	"github.com/poligon/poligon/backends"
)

// Error is a refusal or failure the caller (a model, a script author) should
// read: what went wrong, and a hint of what to do instead. Tools render it
// as "error: ..." plus a "hint: ..." line; scripts see it as a thrown error.
type Error struct {
	Message string
	Hint    string
	Err     error // the backend error behind it, if any
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

// Failf makes an *Error with a hint.
func Failf(hint, format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...), Hint: hint}
}

// wrap turns a backend error into an *Error with a hint, keeping it
// reachable through errors.Is.
func wrap(err error, hint, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	msg := fmt.Sprintf(format, args...)
	if msg != "" {
		msg += ": "
	}
	return &Error{Message: msg + err.Error(), Hint: hint, Err: err}
}

// HintOf answers the hint of an error chain: the first *Error's, else the
// one its backend attached (backends.Hinted), else one from the kind of
// failure, or "".
func HintOf(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Hint != "" {
		return e.Hint
	}
	if h := backends.HintOf(err); h != "" {
		return h
	}
	switch {
	case errors.Is(err, backends.ErrExists):
		return "the name is taken: pick another one"
	case errors.Is(err, backends.ErrNotFound):
		return "check the name or id above; vm_list_my_vms, vm_list_templates and iso_list list what exists"
	}
	return ""
}
