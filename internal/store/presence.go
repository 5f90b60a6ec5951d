package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
)

// Presence: a process that others must know to be alive (a stand's builder)
// holds an flock on a file of its own under the state directory for as long
// as it works. However it ends, exit, crash or kill -9, the kernel lets go
// of the lock, so another process asking Present learns at once, with no
// heartbeat to wait out and no process table to read (a pid is reused; a
// lock is not). The lock belongs to the open file, so a holder in the same
// process is told apart from a closed one too (a test's "restart").

var presenceID = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

func (s *Store) presencePath(id string) (string, error) {
	if !presenceID.MatchString(id) {
		return "", fmt.Errorf("presence id %q is not [a-z0-9-]{1,64}", id)
	}
	return filepath.Join(filepath.Dir(s.path), "presence", id), nil
}

// Hold makes id present until release is called or the process ends.
func (s *Store) Hold(id string) (release func(), err error) {
	path, err := s.presencePath(id)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("presence %s is held already: %w", id, err)
	}
	return func() {
		os.Remove(path) // before the lock goes: a Present in between sees no file, as after
		f.Close()
	}, nil
}

// Present reports whether id is held by a live process. A file left by a
// holder that died is removed on the way.
func (s *Store) Present(id string) bool {
	path, err := s.presencePath(id)
	if err != nil {
		return false
	}
	f, err := os.Open(path) // flock needs no write access
	if err != nil {
		return false // never held, or released
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true
	}
	if err == nil {
		os.Remove(path) // its holder died without releasing
	}
	return false
}
