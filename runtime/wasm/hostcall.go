package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/poligon/poligon/runtime"
	"github.com/tetratelabs/wazero/api"
)

// The wire of doc.go; stdlib/go/poligon holds the guest's side.
const (
	abiVersion   = 1
	hostModule   = "poligon"
	hostCallName = "call"

	statusOK    = 0
	statusError = 1
	statusShort = 2
)

// errorBody is a failure on the wire, in both directions.
type errorBody struct {
	Message string `json:"message"`
	Call    string `json:"call,omitempty"`
	Hint    string `json:"hint,omitempty"`
	Ref     int    `json:"ref,omitempty"`
	Where   string `json:"where,omitempty"` // "file:line" of a guest's panic
}

// callState is one instance's side of poligon.call, reached through the
// context of the export call (wazero passes it to host functions).
type callState struct {
	host         runtime.Host
	pending      []byte // an answer too large for the guest's buffer
	pendingState uint32
	errs         []error // the host's errors; ref n is errs[n-1]
}

type callStateKey struct{}

// abiError is a guest breaking the wire; raised in poligon.call, it traps
// the instance. Its msg follows the script's name: "script x <msg>".
type abiError struct{ msg string }

func (e *abiError) Error() string { return e.msg }

func abiErrorf(format string, args ...any) *abiError {
	return &abiError{"broke the poligon ABI: " + fmt.Sprintf(format, args...)}
}

// hostCall is poligon.call: (name, args, buf) -> status<<32 | length.
func hostCall(ctx context.Context, mod api.Module, stack []uint64) {
	st, _ := ctx.Value(callStateKey{}).(*callState)
	if st == nil {
		panic(abiErrorf("poligon.call outside a run"))
	}
	mem := mod.Memory()
	bufPtr, bufCap := api.DecodeU32(stack[4]), api.DecodeU32(stack[5])
	var answer []byte
	var status uint32
	if nameLen := api.DecodeU32(stack[1]); nameLen == 0 {
		if st.pending == nil {
			panic(abiErrorf("collected an answer with nothing pending"))
		}
		answer, status, st.pending = st.pending, st.pendingState, nil
	} else {
		name := string(readGuest(mem, api.DecodeU32(stack[0]), nameLen, "call name"))
		args := readGuest(mem, api.DecodeU32(stack[2]), api.DecodeU32(stack[3]), "call arguments")
		answer, status = st.call(ctx, name, args)
	}
	if uint64(len(answer)) > uint64(bufCap) {
		st.pending, st.pendingState = answer, status
		stack[0] = statusShort<<32 | uint64(len(answer))
		return
	}
	if !mem.Write(bufPtr, answer) {
		panic(abiErrorf("answer buffer [%d, +%d) is outside memory", bufPtr, bufCap))
	}
	stack[0] = uint64(status)<<32 | uint64(len(answer))
}

// call asks the host and answers the JSON answer or an error envelope.
func (st *callState) call(ctx context.Context, name string, args []byte) ([]byte, uint32) {
	if len(args) == 0 {
		args = []byte("{}")
	}
	if !json.Valid(args) {
		return st.fail(name, fmt.Errorf("%s: the arguments are not JSON", name)), statusError
	}
	if ctx.Err() != nil {
		return st.fail(name, fmt.Errorf("%s: the run has ended: %w", name, context.Cause(ctx))), statusError
	}
	answer, err := st.host.Call(ctx, name, json.RawMessage(args))
	if err != nil {
		return st.fail(name, err), statusError
	}
	if len(answer) == 0 {
		answer = json.RawMessage("null")
	}
	return answer, statusOK
}

// fail records a host error and answers its envelope.
func (st *callState) fail(name string, err error) []byte {
	st.errs = append(st.errs, err)
	body := errorBody{Call: name, Message: err.Error(), Ref: len(st.errs)}
	var herr *runtime.HostError
	if errors.As(err, &herr) {
		body.Hint = herr.Hint
		if herr.Call != "" {
			body.Call = herr.Call
		}
	}
	b, _ := json.Marshal(body) // strings and an int: cannot fail
	return b
}

// hostError answers the host error a guest's error envelope refers to.
func (st *callState) hostError(body *errorBody) error {
	if body.Ref > 0 && body.Ref <= len(st.errs) {
		return st.errs[body.Ref-1]
	}
	if body.Call != "" {
		return &runtime.HostError{Call: body.Call, Message: body.Message, Hint: body.Hint}
	}
	return nil
}

// readGuest copies n bytes of guest memory at ptr.
func readGuest(mem api.Memory, ptr, n uint32, what string) []byte {
	b, ok := mem.Read(ptr, n)
	if !ok {
		panic(abiErrorf("%s [%d, +%d) is outside memory", what, ptr, n))
	}
	return append([]byte(nil), b...)
}
