package wasm

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
)

// sandboxConfig is the WASI world of one instance: no filesystem, env or
// args (wazero's defaults), output to the run's log, a virtual clock and a
// seeded random source. ctx bounds the guest's sleeps.
func sandboxConfig(ctx context.Context, start time.Time, seed int64, stdout, stderr io.Writer) wazero.ModuleConfig {
	clock := newVirtualClock(start)
	return wazero.NewModuleConfig().
		WithName(""). // anonymous: many instances of one module live side by side
		WithStartFunctions("_initialize").
		WithStdout(stdout).
		WithStderr(stderr).
		WithWalltime(clock.walltime, sys.ClockResolution(time.Microsecond)).
		WithNanotime(clock.nanotime, sys.ClockResolution(time.Microsecond)).
		WithNanosleep(clock.sleeper(ctx)).
		WithOsyield(func() {}).
		WithRandSource(seededRandom(seed))
}

// virtualClock is a guest's time: it starts at the run's clock and moves
// only as the guest reads it (1 µs a reading, so waiting loops progress)
// and sleeps, so it is the same in every run of the same script.
type virtualClock struct {
	start   int64 // Unix nanoseconds
	elapsed atomic.Int64
}

const clockTick = int64(time.Microsecond)

func newVirtualClock(start time.Time) *virtualClock {
	if start.IsZero() {
		start = time.Unix(0, 0)
	}
	return &virtualClock{start: start.UnixNano()}
}

func (c *virtualClock) nanotime() int64 { return c.elapsed.Add(clockTick) }

func (c *virtualClock) walltime() (sec int64, nsec int32) {
	t := c.start + c.elapsed.Add(clockTick)
	return t / 1e9, int32(t % 1e9)
}

// sleeper advances the clock by the whole sleep and really waits, but no
// longer than the run lasts.
func (c *virtualClock) sleeper(ctx context.Context) sys.Nanosleep {
	return func(ns int64) {
		c.elapsed.Add(ns)
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// seededRandom is the guest's random_get: ChaCha8 keyed by the run's seed.
func seededRandom(seed int64) io.Reader {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], uint64(seed))
	copy(key[8:], "poligon wasm random source")
	return rand.NewChaCha8(key)
}
