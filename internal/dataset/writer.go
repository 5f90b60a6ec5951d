package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrNoSpace is Writer's answer while the dataset volume is below its
// free-space floor: the shot is not taken (counted as no_space).
var ErrNoSpace = errors.New("the dataset volume is below its free-space floor")

// pngSignature starts every PNG file.
var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// Writer saves shots into a capture directory. It is safe for concurrent
// use, and several processes may write into one directory: shot numbers
// are claimed by creating the file exclusively, and index lines are
// appended under an exclusive lock on the index.
type Writer struct {
	Counters Counters

	dir     string
	minFree uint64 // bytes

	mu   sync.Mutex     // guards next
	next map[string]int // <session>/<agent> -> the number to try next

	indexMu sync.Mutex // one append at a time from this process (flock is per open file)
}

// NewWriter opens a capture directory (creating it) with a free-space
// floor of minFreeMB megabytes on its volume.
func NewWriter(dir string, minFreeMB int64) (*Writer, error) {
	if dir == "" {
		return nil, failf("set POLIGON_MCP_DATASET to a directory, or leave capture off", "no dataset directory")
	}
	if minFreeMB < 0 {
		return nil, failf("the floor is in MB, 0 or more (2048 by default)", "dataset free-space floor %d MB is negative", minFreeMB)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("dataset directory: %w", err)
	}
	return &Writer{dir: abs, minFree: uint64(minFreeMB) << 20, next: map[string]int{}}, nil
}

// Dir answers the capture directory (absolute).
func (w *Writer) Dir() string { return w.dir }

// Shot is one frame to save, with what is known about it.
type Shot struct {
	Session string // SessionName(...): the directory the files go to
	Agent   string // the file-name prefix, <agent>-shot-NNNN.png
	PNG     []byte // the full console frame, PNG-encoded and never scaled
	// ATSPI is the guest dump script's output (a Dump as JSON), nil when
	// none was read (then Line.ATSPIError should say why). A dump that
	// only reports an error is not written: its error goes to atspi_error.
	ATSPI []byte
	// OCR is every word OCR read from the frame. The .ocr.tsv is written
	// unless Line.OCRError says OCR failed (an empty screen has no words,
	// and that is still an answer).
	OCR []Word
	// Line carries the rest of the index line: click, click_source, label,
	// intent, drag, app, locale, theme, bench, origin, req, vmid, node,
	// screen_changed, mode, the errors. Write fills shot, atspi, ocr,
	// session, agent, ts (when empty), frame_w/h, guest_w/h, rescaled,
	// atspi_widgets, hard, coord_space and screen_type from the files,
	// and locale/locale_raw from the dump unless the caller set them.
	Line Line
}

// Write saves one shot: the PNG, the dump and the OCR sidecars, each
// synced to disk, then its index line, so an index line never points at
// a file a crash lost. It answers the line written. ErrNoSpace (counted as
// no_space) means the volume is below the floor and nothing was written;
// any other error (counted as failed) leaves no files behind.
func (w *Writer) Write(s Shot) (Line, error) {
	l, err := w.write(s)
	switch {
	case errors.Is(err, ErrNoSpace):
		w.Counters.NoSpace.Add(1)
	case err != nil:
		w.Counters.Failed.Add(1)
	default:
		w.Counters.count(&l)
	}
	return l, err
}

// Room answers ErrNoSpace (counted as no_space) while the volume is below
// the floor, so the capture code can skip a shot's dump and OCR before it
// does them; Write checks again.
func (w *Writer) Room() error {
	err := w.room()
	if errors.Is(err, ErrNoSpace) {
		w.Counters.NoSpace.Add(1)
	}
	return err
}

func (w *Writer) room() error {
	free, err := FreeBytes(w.dir)
	if err != nil {
		return err
	}
	if free < w.minFree {
		return fmt.Errorf("%w (%d MB free, floor %d MB)", ErrNoSpace, free>>20, w.minFree>>20)
	}
	return nil
}

// Outcome names a Write's result as the capture code logs it: written,
// no_space or failed.
func Outcome(err error) string {
	switch {
	case err == nil:
		return "written"
	case errors.Is(err, ErrNoSpace):
		return "no_space"
	}
	return "failed"
}

func (w *Writer) write(s Shot) (Line, error) {
	if !ValidName(s.Session) {
		return Line{}, fmt.Errorf("dataset: session %q is not a directory name", s.Session)
	}
	if !ValidName(s.Agent) {
		return Line{}, fmt.Errorf("dataset: agent %q is not a file-name prefix (letters, digits, . _ -)", s.Agent)
	}
	if !bytes.HasPrefix(s.PNG, pngSignature) {
		return Line{}, errors.New("dataset: the frame is not a PNG")
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(s.PNG))
	if err != nil {
		return Line{}, fmt.Errorf("dataset: the frame: %w", err)
	}
	if err := w.room(); err != nil {
		return Line{}, err
	}

	l := s.Line
	l.Session, l.Agent = s.Session, s.Agent
	l.FrameW, l.FrameH = cfg.Width, cfg.Height
	l.ATSPIWidgets, l.Hard, l.Rescaled = 0, nil, nil
	if l.TS == "" {
		l.TS = strconv.FormatInt(time.Now().Unix(), 10)
	}
	dump := w.prepareDump(s.ATSPI, &l)
	if l.LocaleRaw == "" {
		l.LocaleRaw = l.Locale
	}
	l.Locale = NormalizeLocale(l.Locale)
	var ocr []byte
	if l.OCRError == "" {
		ocr = FormatOCR(s.OCR)
	}

	sessionDir := filepath.Join(w.dir, s.Session)
	_, statErr := os.Stat(sessionDir)
	if err := os.MkdirAll(sessionDir, 0o750); err != nil {
		return Line{}, err
	}
	f, name, err := w.claim(sessionDir, s.Agent)
	if err != nil {
		return Line{}, err
	}
	var written []string
	fail := func(err error) (Line, error) {
		for _, p := range written {
			os.Remove(p)
		}
		return Line{}, err
	}
	written = append(written, filepath.Join(sessionDir, name))
	if err := finish(f, s.PNG); err != nil {
		return fail(err)
	}
	l.Shot = s.Session + "/" + name
	l.ATSPI, l.OCR = "", ""
	for _, side := range []struct {
		data []byte
		rel  *string
		name string
	}{{dump, &l.ATSPI, ATSPIName(name)}, {ocr, &l.OCR, OCRName(name)}} {
		if side.data == nil {
			continue
		}
		path := filepath.Join(sessionDir, side.name)
		written = append(written, path)
		if err := writeSynced(path, side.data); err != nil {
			return fail(err)
		}
		*side.rel = s.Session + "/" + side.name
	}
	if err := syncDir(sessionDir); err != nil {
		return fail(err)
	}
	if os.IsNotExist(statErr) {
		if err := syncDir(w.dir); err != nil { // the new session directory's own entry
			return fail(err)
		}
	}
	if err := w.appendLine(l); err != nil {
		return fail(err)
	}
	return l, nil
}

// prepareDump reads the guest's dump into the line's fields and answers
// the sidecar to write, or nil when there is none worth writing.
func (w *Writer) prepareDump(raw []byte, l *Line) []byte {
	if raw == nil {
		if l.ATSPIError == "" {
			l.ATSPIError = "no dump taken"
		}
		return nil
	}
	d, err := ParseDump(raw)
	if err != nil {
		l.ATSPIError = err.Error()
		return nil
	}
	if len(d.Widgets) == 0 && d.Error != "" {
		l.ATSPIError = d.Error // the error alone is no ground truth
		return nil
	}
	d.keepShowing()
	if l.Locale == "" {
		l.Locale = d.Locale
	}
	if l.ScreenType == "" {
		l.ScreenType = d.SessionType
	}
	l.CoordSpace = "physical"
	if d.Logical() {
		l.CoordSpace = "logical" // the exporter places it from the shell's root widget
	}
	l.GuestW, l.GuestH = d.Screen[0], d.Screen[1]
	frame := [2]int{l.FrameW, l.FrameH}
	if !d.Logical() && d.Screen[0] > 0 && d.Screen[1] > 0 && d.Screen != frame {
		l.Rescaled = &Rescale{From: d.Screen, To: frame}
		d = d.scaled(d.Screen, frame)
	}
	l.ATSPIWidgets = len(d.Widgets)
	hard := d.Hard()
	l.Hard = &hard
	l.ATSPIError = d.Error // a partial walk says what stopped it
	out, err := json.Marshal(d)
	if err != nil {
		l.ATSPIError = err.Error()
		return nil
	}
	return out
}

// claim creates the agent's next shot file in dir exclusively and answers
// it open, with its name. Numbers go on from the highest on disk, so a
// restart or a second process continues the sequence without a gap or a
// collision.
func (w *Writer) claim(dir, agent string) (*os.File, string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := filepath.Base(dir) + "/" + agent
	n, ok := w.next[key]
	for attempt := 0; attempt < 100; attempt++ {
		if !ok {
			highest, err := highestShot(dir, agent)
			if err != nil {
				return nil, "", err
			}
			n, ok = highest+1, true
		}
		name := ShotName(agent, n)
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if errors.Is(err, os.ErrExist) {
			ok = false // another process took it: look again
			continue
		}
		if err != nil {
			return nil, "", err
		}
		w.next[key] = n + 1
		return f, name, nil
	}
	return nil, "", fmt.Errorf("dataset: no free shot number for %s in %s", agent, dir)
}

// highestShot answers the highest NNNN of the agent's shots in dir, 0 when
// there are none.
func highestShot(dir, agent string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	highest := 0
	for _, e := range entries {
		if n, ok := shotNumber(e.Name(), agent); ok && n > highest {
			highest = n
		}
	}
	return highest, nil
}

// appendLine appends the line to the index in one write, synced. A crash
// in the middle of an earlier append can leave a last line without its
// newline; that line is ended first, so this one is not glued onto it.
func (w *Writer) appendLine(l Line) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.indexMu.Lock()
	defer w.indexMu.Unlock()
	f, err := os.OpenFile(filepath.Join(w.dir, IndexName), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("dataset index lock: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err != nil && err != io.EOF {
			return err
		}
		if last[0] != '\n' {
			b = append([]byte{'\n'}, b...)
		}
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.Sync()
}

// finish writes data to an open new file, syncs and closes it.
func finish(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeSynced writes a file and syncs it to disk.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	return finish(f, data)
}

// syncDir syncs a directory, so the entries created in it survive a crash.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// FreeBytes answers the space an unprivileged writer has left on the
// volume holding path.
func FreeBytes(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("dataset volume: %w", err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}
