package js

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// The memory ceiling of a run, an approximation.
//
// goja allocates on the Go heap and keeps no account per runtime, and Go
// keeps none per goroutine, so a run's own usage cannot be measured. What
// can be: the growth of the process heap while the run lasts. watchMemory
// samples runtime/metrics every memoryTick and trips when the live heap has
// grown past the ceiling over its value when the run started:
//   - "/gc/heap/live:bytes" (the heap the last GC found live) past the
//     ceiling trips at once;
//   - "/memory/classes/heap/objects:bytes" (live plus garbage not yet
//     swept) past it forces a GC first (at most every memoryGCEvery) and
//     trips only if the heap is still over after it, so garbage a script
//     churns through does not count.
//
// Consequences: concurrent runs (and anything else the process does) share
// the ceiling, so a run can be blamed for another's growth; an allocation
// made inside one native builtin lands before the watchdog can act (the
// guards in guards.go refuse the obvious ones up front); the overshoot is
// what the script allocates within one tick (a few MB).
const (
	memoryTick    = 10 * time.Millisecond
	memoryGCEvery = 250 * time.Millisecond
)

var heapMetrics = []string{"/gc/heap/live:bytes", "/memory/classes/heap/objects:bytes"}

func heapBytes() (live, objects uint64) {
	samples := []metrics.Sample{{Name: heapMetrics[0]}, {Name: heapMetrics[1]}}
	metrics.Read(samples)
	return samples[0].Value.Uint64(), samples[1].Value.Uint64()
}

// watchMemory calls trip once when the process heap grows more than limit
// bytes over its size now; stop ends the watch.
func watchMemory(limit uint64, trip func()) (stop func()) {
	base, _ := heapBytes()
	ceiling := base + limit
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(memoryTick)
		defer ticker.Stop()
		var lastGC time.Time
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
			}
			live, objects := heapBytes()
			if live <= ceiling && objects <= ceiling {
				continue
			}
			if live <= ceiling {
				if time.Since(lastGC) < memoryGCEvery {
					continue
				}
				runtime.GC()
				lastGC = time.Now()
				if _, objects = heapBytes(); objects <= ceiling {
					continue
				}
			}
			trip()
			return
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
