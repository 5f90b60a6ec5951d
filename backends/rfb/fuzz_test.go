package rfb

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"testing"
)

// fuzzSeeds are well-formed server message streams for a 40x30 screen:
// every ZRLE subencoding, Raw, resizes, QEMU's key ack and the small messages.
func fuzzSeeds() map[string][]byte {
	img := testImage(40, 30, 1)
	raw := []byte{msgFramebufferUpdate, 0, 0, 1}
	raw = append(raw, rectHeader(image.Rect(2, 3, 6, 5), EncodingRaw)...)
	raw = append(raw, bytes.Repeat([]byte{1, 2, 3, 0}, 8)...)

	resize := []byte{msgFramebufferUpdate, 0, 0, 3}
	resize = append(resize, rectHeader(image.Rect(0, 0, 0, 0), EncodingQEMUExtendedKey)...)
	resize = append(resize, rectHeader(image.Rect(0, 0, 64, 48), EncodingExtendedDesktopSize)...)
	resize = append(resize, 1, 0, 0, 0)
	resize = append(resize, make([]byte, 16)...)
	resize = append(resize, rectHeader(image.Rect(0, 0, 20, 10), EncodingDesktopSize)...)

	misc := []byte{msgBell, msgServerCutText, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c'}
	misc = append(misc, msgSetColourMapEntries, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0)
	misc = append(misc, msgFramebufferUpdate, 0, 0, 2)
	misc = append(misc, rectHeader(image.Rect(0, 0, 0, 0), EncodingLastRect)...)

	huge := []byte{msgFramebufferUpdate, 0, 0, 1}
	huge = append(huge, rectHeader(image.Rect(0, 0, 65535, 65535), EncodingZRLE)...)
	huge = binary.BigEndian.AppendUint32(huge, 0xffffffff)

	return map[string][]byte{
		"zrle":   zrleMessages(img),
		"raw":    raw,
		"resize": resize,
		"misc":   misc,
		"huge":   huge,
	}
}

// FuzzDecoder feeds arbitrary server bytes to the decoder: it must not
// panic, and a hostile size must fail instead of allocating gigabytes.
func FuzzDecoder(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := newDecoder(bufio.NewReader(bytes.NewReader(data)), 40, 30)
		if err != nil {
			t.Fatal(err)
		}
		d.maxSide, d.maxPixels = 512, 256*256 // keep each run small
		for i := 0; i < 10000; i++ {
			if _, _, err := d.readMessage(); err != nil {
				break
			}
			if d.width*d.height > d.maxPixels || len(d.pix) != 4*d.width*d.height {
				t.Fatalf("framebuffer %dx%d with %d bytes", d.width, d.height, len(d.pix))
			}
		}
	})
}

// TestFuzzSeedCorpus keeps testdata/fuzz/FuzzDecoder in step with fuzzSeeds
// (UPDATE_GOLDEN=1 rewrites it).
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecoder")
	for name, seed := range fuzzSeeds() {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed)
		path := filepath.Join(dir, "seed-"+name)
		if updateGolden {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Errorf("%s is missing or stale (UPDATE_GOLDEN=1 rewrites it): %v", path, err)
		}
	}
}
