package wasm

// tinyScript assembles a minimal module that speaks the ABI without the Go
// SDK: manifest and run both answer envelope, kept in a data segment. It
// compiles in milliseconds, so the tests of Load's checks need no Go guest.
func tinyScript(envelope string) []byte {
	const at = 16 // where the envelope lives in memory
	packed := int64(at)<<32 | int64(len(envelope))

	b := []byte("\x00asm\x01\x00\x00\x00")
	section := func(id byte, body []byte) {
		b = append(b, id)
		b = appendU(b, uint64(len(body)))
		b = append(b, body...)
	}
	vec := func(items ...[]byte) []byte {
		v := appendU(nil, uint64(len(items)))
		for _, it := range items {
			v = append(v, it...)
		}
		return v
	}
	name := func(s string) []byte { return append(appendU(nil, uint64(len(s))), s...) }
	const i32, i64, fn = 0x7f, 0x7e, 0x60
	body := func(code ...byte) []byte { // no locals, code, end
		c := append([]byte{0}, code...)
		c = append(c, 0x0b)
		return append(appendU(nil, uint64(len(c))), c...)
	}

	section(1, vec( // types
		[]byte{fn, 0, 0},                     // () -> ()
		[]byte{fn, 1, i32, 1, i32},           // (i32) -> i32
		[]byte{fn, 0, 1, i64},                // () -> i64
		[]byte{fn, 3, i32, i32, i64, 1, i64}, // (i32, i32, i64) -> i64
	))
	section(3, vec([]byte{0}, []byte{1}, []byte{2}, []byte{3})) // functions' types
	section(5, vec([]byte{0, 1}))                               // one memory, min 1 page
	section(7, vec(                                             // exports
		append(name("_initialize"), 0, 0),
		append(name("alloc"), 0, 1),
		append(name("manifest"), 0, 2),
		append(name("run"), 0, 3),
		append(name("memory"), 2, 0),
	))
	answer := append([]byte{0x42}, appendSLEB(nil, packed)...) // i64.const packed
	section(10, vec(
		body(),
		body(append([]byte{0x41}, appendSLEB(nil, 1024)...)...), // alloc: i32.const 1024
		body(answer...),
		body(answer...),
	))
	segment := []byte{0, 0x41}
	segment = appendSLEB(segment, at)
	segment = append(segment, 0x0b)
	segment = append(segment, name(envelope)...)
	section(11, vec(segment))
	return b
}

// appendU appends v as unsigned LEB128.
func appendU(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
