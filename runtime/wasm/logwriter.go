package wasm

import (
	"bytes"
	"strings"
)

// maxLogLine splits a runaway line so one write cannot hold the log hostage.
const maxLogLine = 4096

// lineWriter turns a guest's stdout or stderr into log lines. It also keeps
// the first line that explains a crash of the Go runtime ("panic: ...",
// "fatal error: ...") for the run's error.
type lineWriter struct {
	log   func(string) // nil: discard
	buf   []byte
	crash string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 && len(w.buf) < maxLogLine {
			return len(p), nil
		}
		if i < 0 || i > maxLogLine {
			i = maxLogLine
		}
		w.emit(string(w.buf[:i]))
		if i < len(w.buf) && w.buf[i] == '\n' {
			i++
		}
		w.buf = w.buf[i:]
	}
}

// Flush emits a last unterminated line.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
		w.buf = nil
	}
}

func (w *lineWriter) emit(line string) {
	line = strings.TrimSuffix(line, "\r")
	if w.crash == "" && (strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ")) {
		w.crash = line
	}
	if w.log != nil {
		w.log(line)
	}
}
