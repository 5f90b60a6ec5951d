package poligon

// ReadFile and WriteFile are written by hand (GoByHand in
// hostapi/calls.Registry): they decode and encode the bytes as text.

import (
	"encoding/base64"
	"fmt"
	"unicode/utf8"

	"github.com/poligon/poligon/hostapi/calls"
)

// ReadFile reads a window of a guest file.
func (vm *VM) ReadFile(path string, opts ...ReadFileOpts) (string, error) {
	o := firstOf(opts)
	var answer calls.ReadFileAnswer
	if err := vm.Call(calls.ReadFile, calls.ReadFileArgs{Path: path, Offset: o.Offset, Max: o.Max}, &answer); err != nil {
		return "", err
	}
	b, err := base64.StdEncoding.DecodeString(answer.Base64)
	if err != nil {
		return "", fmt.Errorf("%s: decode %s: %w", calls.ReadFile, path, err)
	}
	return string(b), nil
}

// WriteFile writes a guest file whole. Text that is not UTF-8 travels as
// base64, so any bytes arrive intact.
func (vm *VM) WriteFile(path, text string) error {
	args := calls.WriteFileArgs{Path: path, Text: text}
	if !utf8.ValidString(text) {
		args = calls.WriteFileArgs{Path: path, Base64: base64.StdEncoding.EncodeToString([]byte(text))}
	}
	return vm.Call(calls.WriteFile, args, nil)
}
