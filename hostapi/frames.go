package hostapi

import (
	"fmt"
	"image"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// The stale-frame guard. Every answer that shows the screen names its frame
// (frame: <digest>); an action aimed from that frame (ui_click frame=...)
// is refused, changing nothing, when the screen has changed where it would
// act since then: the agent aimed at a screen that is gone. Frames are
// remembered as tile hashes (16x16 pixels, QEMU's dirty granularity), not
// pixels: 4000 numbers for 1280x800.

const (
	tileSize   = 16
	keptFrames = 128 // per process: a few minutes of an agent's looks
	// aimSlack is how far around a point an action is taken to depend on
	// the screen: a button's edge, a menu item's height.
	aimSlack = 12
)

type seenFrame struct {
	vm    string
	size  image.Point
	cols  int
	tiles []uint64
	at    time.Time
}

// frameLog is what the process remembers of the frames it answered with.
type frameLog struct {
	mu     sync.Mutex
	frames map[string]*seenFrame
	order  []string
}

func tiles(img *image.RGBA) ([]uint64, int) {
	b := img.Bounds()
	cols, rows := (b.Dx()+tileSize-1)/tileSize, (b.Dy()+tileSize-1)/tileSize
	out := make([]uint64, cols*rows)
	d := xxhash.New()
	for ty := 0; ty < rows; ty++ {
		for tx := 0; tx < cols; tx++ {
			d.Reset()
			x0, x1 := tx*tileSize, min((tx+1)*tileSize, b.Dx())
			for y := ty * tileSize; y < min((ty+1)*tileSize, b.Dy()); y++ {
				d.Write(img.Pix[y*img.Stride+x0*4 : y*img.Stride+x1*4])
			}
			out[ty*cols+tx] = d.Sum64()
		}
	}
	return out, cols
}

func (l *frameLog) note(vm string, f Frame) string {
	digest := f.Digest()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.frames == nil {
		l.frames = map[string]*seenFrame{}
	}
	if old, ok := l.frames[digest]; ok && old.vm == vm {
		old.at = f.At
		return digest
	}
	ts, cols := tiles(f.Image)
	if _, ok := l.frames[digest]; !ok {
		l.order = append(l.order, digest)
	}
	l.frames[digest] = &seenFrame{vm: vm, size: f.Image.Bounds().Size(), cols: cols, tiles: ts, at: f.At}
	if len(l.order) > keptFrames {
		delete(l.frames, l.order[0])
		l.order = l.order[1:]
	}
	return digest
}

// check refuses when now differs from the frame digest inside region.
func (l *frameLog) check(vm, digest string, now *image.RGBA, region image.Rectangle) error {
	l.mu.Lock()
	seen, ok := l.frames[digest]
	l.mu.Unlock()
	retake := "take a new ui_screenshot (or ui_read) and aim from its frame"
	switch {
	case !ok:
		return Failf(retake, "frame %s is not one this server answered with recently (it remembers the last %d)", digest, keptFrames)
	case seen.vm != vm:
		return Failf(retake, "frame %s is another VM's screen", digest)
	case now.Bounds().Size() != seen.size:
		return Failf(retake, "the screen is %dx%d now, %dx%d in frame %s", now.Bounds().Dx(), now.Bounds().Dy(), seen.size.X, seen.size.Y, digest)
	}
	cur, _ := tiles(now)
	r := region.Intersect(now.Bounds())
	for ty := r.Min.Y / tileSize; ty <= (r.Max.Y-1)/tileSize; ty++ {
		for tx := r.Min.X / tileSize; tx <= (r.Max.X-1)/tileSize; tx++ {
			if i := ty*seen.cols + tx; cur[i] != seen.tiles[i] {
				return Failf(retake, "the screen changed near %d,%d since frame %s (%.1f s ago): nothing was done",
					tx*tileSize+tileSize/2, ty*tileSize+tileSize/2, digest, time.Since(seen.at).Seconds())
			}
		}
	}
	return nil
}

// vmKey names a VM across benches for the frame log.
func (v *VM) vmKey() string { return fmt.Sprintf("%s/%d", v.c.lockNS, v.info.VMID) }

// Remember notes a frame this VM's answer shows and answers its digest,
// the name an action's frame= argument gives back.
func (v *VM) Remember(f Frame) string { return v.c.env.frames.note(v.vmKey(), f) }

// around is the region an action at p depends on.
func around(p image.Point) image.Rectangle {
	return image.Rectangle{Min: p, Max: p.Add(image.Pt(1, 1))}.Inset(-aimSlack)
}
