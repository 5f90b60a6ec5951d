package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"reflect"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// TestMergedDataInitialisesTheSameMemory instantiates a Go guest as built
// and as merged, runs neither, and compares their memories.
func TestMergedDataInitialisesTheSameMemory(t *testing.T) {
	original := guestWasm(t, "uname")
	merged := mergeDataSegments(original)
	count := func(wasm []byte) int {
		t.Helper()
		for pos := 8; pos < len(wasm); {
			size, n := binary.Uvarint(wasm[pos+1:])
			if wasm[pos] == dataSectionID {
				segments, ok := parseDataSection(wasm[pos+1+n : pos+1+n+int(size)])
				if !ok {
					t.Fatal("cannot parse the data section")
				}
				return len(segments)
			}
			pos += 1 + n + int(size)
		}
		return 0
	}
	before, after := count(original), count(merged)
	t.Logf("data segments: %d built, %d merged", before, after)
	if after >= before || after == 0 {
		t.Fatalf("merging left %d of %d segments", after, before)
	}

	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter()) // compiles fast; memory is the same
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	if _, err := rt.NewHostModuleBuilder(hostModule).NewFunctionBuilder().
		WithFunc(func(int32, int32, int32, int32, int32, int32) int64 { return 0 }).Export(hostCallName).Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	memory := func(wasm []byte) []byte {
		t.Helper()
		mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			t.Fatal(err)
		}
		defer mod.Close(ctx)
		b, _ := mod.Memory().Read(0, mod.Memory().Size())
		return bytes.Clone(b)
	}
	a, b := memory(original), memory(merged)
	if len(a) != len(b) {
		t.Fatalf("memory sizes differ: %d built, %d merged", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("the merged module's memory differs first at %#x: %#x built, %#x merged", i, a[i], b[i])
		}
	}
}

func TestMergeSortsAndKeepsDistance(t *testing.T) {
	in := []dataSegment{
		{200_003, []byte("!")},
		{0, []byte("ab")},
		{200_000, []byte("far")}, // past mergeGap: kept apart
		{4, []byte("c")},
	}
	want := []dataSegment{
		{0, []byte("ab\x00\x00c")},
		{200_000, []byte("far!")},
	}
	got, ok := mergeSegments(in)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("merged = %+v, %v; want %+v", got, ok, want)
	}
	if string(in[1].init) != "ab" {
		t.Error("merging changed its input")
	}
	// Overlapping segments depend on their order: not merged.
	if _, ok := mergeSegments([]dataSegment{{0, []byte("abc")}, {2, []byte("X")}}); ok {
		t.Error("overlapping segments merged")
	}
}

func TestMergeLeavesOtherModulesAlone(t *testing.T) {
	for name, wasm := range map[string][]byte{
		"one segment": tinyScript(`{"abi":1}`),
		"no data":     []byte("\x00asm\x01\x00\x00\x00"),
		"not wasm":    []byte("hello"),
	} {
		if got := mergeDataSegments(wasm); &got[0] != &wasm[0] {
			t.Errorf("%s: rewritten", name)
		}
	}
}

func TestSignedLEB(t *testing.T) {
	for _, v := range []int32{0, 1, -1, 63, 64, -64, -65, 1 << 20, math.MaxInt32, math.MinInt32} {
		b := appendSLEB(nil, int64(v))
		got, n := decodeSLEB32(b)
		if got != v || n != len(b) {
			t.Errorf("%d: encoded % x, decoded %d (%d bytes)", v, b, got, n)
		}
	}
}
