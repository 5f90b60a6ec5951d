package app

import (
	"io"
	"sync"
)

// The console dump (POLIGON_MCP_DUMP) is one file for the process, as the
// variable is: every console a bench opens after SetConsoleDump records
// the raw bytes its VNC server sends into it, to capture a test fixture.
var dump struct {
	sync.Mutex
	w io.Writer
}

// SetConsoleDump makes the consoles of the benches opened from now on
// record into w (nil: none do). Consoles write whole reads one at a time;
// a fixture wants one console session, so open one while it records.
func SetConsoleDump(w io.Writer) {
	dump.Lock()
	defer dump.Unlock()
	dump.w = nil
	if w != nil {
		dump.w = &lockedWriter{w: w}
	}
}

// dumpWriter answers the dump for a bench being opened, nil for none.
func dumpWriter() io.Writer {
	dump.Lock()
	defer dump.Unlock()
	return dump.w
}

// lockedWriter serializes the writes of every console.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
