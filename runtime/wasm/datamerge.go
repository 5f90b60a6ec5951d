package wasm

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"
)

// A Go guest's data section holds tens of thousands of small segments (the
// linker splits it at every run of zeros), and wazero evaluates each one's
// offset on every instantiation: ~2 ms of every run. mergeDataSegments
// rewrites the section into a few segments with the zeros filled in, which
// initialise exactly the same memory.

// mergeGap is the longest run of zeros worth copying to join two segments.
const mergeGap = 64 << 10

const dataSectionID, dataCountSectionID = 11, 12

// dataSegment is an active segment of memory 0 at a constant offset.
type dataSegment struct {
	offset uint32
	init   []byte
}

// mergeDataSegments answers wasm with its data segments merged, or wasm
// itself when it has nothing to merge or a shape this does not handle
// (passive segments, computed offsets, a data count section, overlapping
// segments).
func mergeDataSegments(wasm []byte) []byte {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return wasm
	}
	var dataStart, dataEnd, bodyStart int
	for pos := 8; pos < len(wasm); {
		id := wasm[pos]
		size, n := binary.Uvarint(wasm[pos+1:])
		if n <= 0 || uint64(len(wasm)-pos-1-n) < size {
			return wasm
		}
		switch id {
		case dataCountSectionID:
			return wasm
		case dataSectionID:
			dataStart, bodyStart, dataEnd = pos, pos+1+n, pos+1+n+int(size)
		}
		pos += 1 + n + int(size)
	}
	if dataStart == 0 {
		return wasm
	}
	segments, ok := parseDataSection(wasm[bodyStart:dataEnd])
	if !ok || len(segments) < 2 {
		return wasm
	}
	merged, ok := mergeSegments(segments)
	if !ok || len(merged) == len(segments) {
		return wasm
	}
	body := encodeDataSection(merged)
	out := make([]byte, 0, len(wasm))
	out = append(out, wasm[:dataStart]...)
	out = append(out, dataSectionID)
	out = binary.AppendUvarint(out, uint64(len(body)))
	out = append(out, body...)
	return append(out, wasm[dataEnd:]...)
}

// parseDataSection reads segments of the form 0x00 (i32.const N) end bytes.
func parseDataSection(b []byte) ([]dataSegment, bool) {
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, false
	}
	b = b[n:]
	segments := make([]dataSegment, 0, count)
	for range count {
		if len(b) < 2 || b[0] != 0x00 || b[1] != 0x41 { // active, memory 0; i32.const
			return nil, false
		}
		offset, n := decodeSLEB32(b[2:])
		if n <= 0 || len(b) < 2+n+1 || b[2+n] != 0x0b { // end
			return nil, false
		}
		b = b[2+n+1:]
		size, m := binary.Uvarint(b)
		if m <= 0 || uint64(len(b)-m) < size {
			return nil, false
		}
		segments = append(segments, dataSegment{offset: uint32(offset), init: b[m : m+int(size)]}) // i32 as u32
		b = b[m+int(size):]
	}
	return segments, len(b) == 0
}

// mergeSegments sorts segments by offset and joins those within mergeGap
// of each other. Zeros may fill a gap only because no two segments overlap
// (then the order they apply in does not matter); it answers false when
// some do.
func mergeSegments(segments []dataSegment) ([]dataSegment, bool) {
	sorted := slices.Clone(segments)
	slices.SortStableFunc(sorted, func(a, b dataSegment) int { return cmp.Compare(a.offset, b.offset) })
	var out []dataSegment
	for _, s := range sorted {
		if len(out) > 0 {
			last := &out[len(out)-1]
			end := uint64(last.offset) + uint64(len(last.init))
			if uint64(s.offset) < end {
				return nil, false
			}
			if uint64(s.offset)-end <= mergeGap {
				last.init = append(last.init, make([]byte, uint64(s.offset)-end)...)
				last.init = append(last.init, s.init...)
				continue
			}
		}
		out = append(out, dataSegment{offset: s.offset, init: slices.Clone(s.init)})
	}
	return out, true
}

func encodeDataSection(segments []dataSegment) []byte {
	b := binary.AppendUvarint(nil, uint64(len(segments)))
	for _, s := range segments {
		b = append(b, 0x00, 0x41)
		b = appendSLEB(b, int64(int32(s.offset))) // i32.const is signed
		b = append(b, 0x0b)
		b = binary.AppendUvarint(b, uint64(len(s.init)))
		b = append(b, s.init...)
	}
	return b
}

// decodeSLEB32 reads a signed LEB128 i32 (binary.Varint is zig-zag, not
// LEB128); n <= 0 when b does not hold one.
func decodeSLEB32(b []byte) (v int32, n int) {
	var x int64
	var shift uint
	for n < len(b) && n < 5 {
		c := b[n]
		n++
		x |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				x |= -1 << shift
			}
			return int32(x), n
		}
	}
	return 0, 0
}

// appendSLEB appends v as signed LEB128.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
