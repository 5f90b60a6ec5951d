package ocr

import "sync"

// lineCache remembers what crops read as, by their pixels. Two generations
// stand in for an LRU: entries used in the current one survive the next
// turnover, the rest are dropped with the old generation.
type lineCache struct {
	mu        sync.Mutex
	cur, prev map[uint64][]Word
	half      int
}

func newLineCache(n int) *lineCache {
	return &lineCache{cur: map[uint64][]Word{}, prev: map[uint64][]Word{}, half: max(1, n/2)}
}

func (c *lineCache) get(k uint64) ([]Word, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.cur[k]; ok {
		return v, true
	}
	if v, ok := c.prev[k]; ok {
		c.putLocked(k, v)
		return v, true
	}
	return nil, false
}

// peek looks without counting as a use.
func (c *lineCache) peek(k uint64) ([]Word, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.cur[k]; ok {
		return v, true
	}
	v, ok := c.prev[k]
	return v, ok
}

func (c *lineCache) put(k uint64, v []Word) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(k, v)
}

func (c *lineCache) putLocked(k uint64, v []Word) {
	if len(c.cur) >= c.half {
		c.prev, c.cur = c.cur, make(map[uint64][]Word, c.half)
	}
	c.cur[k] = v
}

// Len answers how many lines are remembered.
func (c *lineCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}
