package dataset

import (
	"bytes"
	"crypto/sha256"
	"math"
	"slices"
	"strconv"
)

// splitSessions answers which sessions go to validation. The split is by
// session, not by shot, so the near-identical frames of one login run
// never land in both halves. Sessions are ordered by a hash of the seed
// and their name and the first round(fraction*n) go to validation (at
// least one when fraction > 0 and there are two sessions or more, never
// all of them): the same seed gives the same split, another seed another.
func splitSessions(sessions []string, seed int64, fraction float64) map[string]bool {
	type keyed struct {
		key  [32]byte
		name string
	}
	order := make([]keyed, len(sessions))
	for i, s := range sessions {
		order[i] = keyed{sha256.Sum256([]byte(strconv.FormatInt(seed, 10) + "\x00" + s)), s}
	}
	slices.SortFunc(order, func(a, b keyed) int { return bytes.Compare(a.key[:], b.key[:]) })
	n := len(order)
	k := int(math.Round(fraction * float64(n)))
	if fraction > 0 && k == 0 && n >= 2 {
		k = 1
	}
	if k >= n && n > 0 {
		k = n - 1
	}
	val := map[string]bool{}
	for _, o := range order[:max(k, 0)] {
		val[o.name] = true
	}
	return val
}
