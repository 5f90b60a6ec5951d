package dataset

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

func TestSplitSessions(t *testing.T) {
	var sessions []string
	for i := range 20 {
		sessions = append(sessions, fmt.Sprintf("s%02d", i))
	}
	a := splitSessions(sessions, 1, 0.25)
	if len(a) != 5 {
		t.Fatalf("%d of 20 sessions to validation at 0.25", len(a))
	}
	if b := splitSessions(reversed(sessions), 1, 0.25); !maps.Equal(a, b) {
		t.Fatal("the split depends on the sessions' order")
	}
	if c := splitSessions(sessions, 2, 0.25); maps.Equal(a, c) {
		t.Fatal("seeds 1 and 2 give the same split")
	}
	for _, c := range []struct {
		n        int
		fraction float64
		want     int
	}{{1, 0.5, 0}, {2, 0.1, 1}, {3, 0, 0}, {3, 0.99, 2}, {0, 0.5, 0}} {
		if got := len(splitSessions(sessions[:c.n], 7, c.fraction)); got != c.want {
			t.Errorf("%d sessions at %v: %d to validation, want %d", c.n, c.fraction, got, c.want)
		}
	}
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}
