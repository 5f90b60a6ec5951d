//go:build wasip1

package poligon

import (
	"sync"
	"unsafe"
)

// The wire to the host, as runtime/wasm/doc.go describes it.

//go:wasmimport poligon call
func hostCall(name *byte, nameLen uint32, args *byte, argsLen uint32, buf *byte, bufCap uint32) uint64

var (
	// inbox holds what the host wrote through alloc until run reads it.
	inbox []byte
	// outbox keeps the last manifest or run answer alive until the host has
	// read it.
	outbox []byte
	// callMu guards scratch, the buffer most call answers land in.
	callMu  sync.Mutex
	scratch = make([]byte, 64<<10)
)

//go:wasmexport alloc
func wasmAlloc(size uint32) unsafe.Pointer {
	inbox = make([]byte, size+1) // +1: a valid pointer even for size 0
	return unsafe.Pointer(&inbox[0])
}

//go:wasmexport manifest
func wasmManifest() uint64 { return publish(manifestEnvelope()) }

//go:wasmexport run
func wasmRun(params unsafe.Pointer, paramsLen uint32, vmid int64) uint64 {
	in := unsafe.Slice((*byte)(params), paramsLen)
	answer := runEnvelope(in, int(vmid), wasmCall)
	inbox = nil
	return publish(answer)
}

// publish keeps b for the host and answers its pointer and length packed.
func publish(b []byte) uint64 {
	outbox = b
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))<<32 | uint64(len(b))
}

// wasmCall is the Caller of a Wasm build: poligon.call into scratch, and a
// second, collecting call with an empty name when the answer is larger.
func wasmCall(name string, args []byte) ([]byte, error) {
	if name == "" {
		return nil, &Error{Message: "a host call needs a name"}
	}
	callMu.Lock()
	defer callMu.Unlock()
	r := hostCall(unsafe.StringData(name), uint32(len(name)), unsafe.SliceData(args), uint32(len(args)), &scratch[0], uint32(len(scratch)))
	status, n := uint32(r>>32), uint32(r)
	var data []byte
	if status == statusShort {
		data = make([]byte, n+1)
		r = hostCall(nil, 0, nil, 0, &data[0], n+1)
		status, n = uint32(r>>32), uint32(r)
		data = data[:n]
	} else {
		data = append([]byte(nil), scratch[:n]...)
	}
	return decodeAnswer(name, status, data)
}
