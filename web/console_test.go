package web

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/draw"
	"image/png"
	"testing"
	"time"

	"github.com/poligon/poligon/hostapi"
)

// A change message, drawn on the frame a browser shows, makes the new
// frame exactly; it carries only the rectangle that changed.
func TestChangeMessagesRebuildTheFrame(t *testing.T) {
	prev := image.NewRGBA(image.Rect(0, 0, 720, 400))
	for i := range prev.Pix {
		prev.Pix[i] = byte(i * 7)
		if i%4 == 3 {
			prev.Pix[i] = 0xff // a screen is opaque
		}
	}
	next := image.NewRGBA(prev.Rect)
	copy(next.Pix, prev.Pix)
	for _, p := range []image.Point{{100, 50}, {130, 52}, {101, 60}} {
		next.Set(p.X, p.Y, image.Black)
	}
	at := time.UnixMilli(1_700_000_000_123)
	msg, err := encodeChange(hostapi.Frame{Image: next, At: at}, prev)
	if err != nil {
		t.Fatal(err)
	}
	shown := image.NewRGBA(prev.Rect)
	copy(shown.Pix, prev.Pix)
	r := apply(t, shown, msg.data)
	if r != image.Rect(100, 50, 131, 61) {
		t.Errorf("the message carries %v, want the changed rectangle", r)
	}
	if !bytes.Equal(shown.Pix, next.Pix) {
		t.Error("prev with the change drawn on it is not the new frame")
	}
	if got := binary.BigEndian.Uint64(msg.data[13:]); got != uint64(at.UnixMilli()) {
		t.Errorf("change time %d", got)
	}
	if msg, _ := encodeChange(hostapi.Frame{Image: next}, next); msg.data != nil {
		t.Error("an unchanged frame makes a message")
	}
	// A first frame, or one of another size, goes whole.
	msg, err = encodeChange(hostapi.Frame{Image: next}, nil)
	if err != nil {
		t.Fatal(err)
	}
	blank := image.NewRGBA(prev.Rect)
	if r := apply(t, blank, msg.data); r != next.Rect || !bytes.Equal(blank.Pix, next.Pix) {
		t.Errorf("the whole frame: %v", r)
	}
}

// apply draws a message on img as the page does, answering its rectangle.
func apply(t *testing.T, img *image.RGBA, data []byte) image.Rectangle {
	t.Helper()
	u := func(i int) int { return int(binary.BigEndian.Uint16(data[1+2*i:])) }
	if data[0] != kindPNG || u(4) != img.Rect.Dx() || u(5) != img.Rect.Dy() {
		t.Fatalf("header %v", data[:headerLen])
	}
	part, err := png.Decode(bytes.NewReader(data[headerLen:]))
	if err != nil {
		t.Fatal(err)
	}
	r := image.Rect(u(0), u(1), u(0)+u(2), u(1)+u(3))
	if part.Bounds().Size() != r.Size() {
		t.Fatalf("the image is %v, the header says %v", part.Bounds(), r)
	}
	draw.Draw(img, r, part, part.Bounds().Min, draw.Src)
	return r
}
