package wasm

import (
	"slices"
	"sync"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/poligon/poligon/runtime"
)

// loadMemoryMB caps the linear memory of the instance that reads a
// module's manifest at load time.
var loadMemoryMB = runtime.DefaultLimits.MemoryMB

// cappedMemory backs one instance's linear memory and refuses to grow it
// past limit bytes, so a per-run cap needs no per-limit runtime (wazero's
// own page limit is fixed when a module is compiled). A refused grow makes
// memory.grow answer -1, which a Go guest reports as out of memory.
type cappedMemory struct {
	limit   uint64
	buf     []byte
	refused bool // set once a grow was refused: the run ran out of memory
}

var _ experimental.MemoryAllocator = (*cappedMemory)(nil)

// Allocate implements experimental.MemoryAllocator: one memory per instance.
func (m *cappedMemory) Allocate(capacity, _ uint64) experimental.LinearMemory {
	m.buf = getBuffer(min(capacity, m.limit))
	return m
}

// Reallocate implements experimental.LinearMemory.
func (m *cappedMemory) Reallocate(size uint64) []byte {
	if size > m.limit {
		m.refused = true
		return nil
	}
	if grow := int(size) - len(m.buf); grow > 0 {
		m.buf = slices.Grow(m.buf, grow) // the new bytes are zero, as wasm wants
	}
	m.buf = m.buf[:size]
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *cappedMemory) Free() {
	putBuffer(m.buf)
	m.buf = nil
}

// Linear memories are recycled: a fresh one costs a page fault per page
// touched, and a Go guest grows (copies) its memory several times while it
// starts, so reusing a zeroed buffer that already grew is several times
// cheaper than a new one.
var buffers sync.Pool // of *[]byte, zeroed, length 0

// maxPooled keeps buffers of guests that hoarded memory out of the pool.
const maxPooled = 64 << 20

func getBuffer(capacity uint64) []byte {
	if p, ok := buffers.Get().(*[]byte); ok && uint64(cap(*p)) >= capacity {
		return *p
	}
	return make([]byte, 0, capacity)
}

func putBuffer(b []byte) {
	if cap(b) > maxPooled {
		return
	}
	clear(b) // only what the guest could have written: its length
	b = b[:0]
	buffers.Put(&b)
}
