package editdist

import "testing"

func TestLevenshtein(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"ret", "ret", 0}, {"Далее", "Далеe", 1}, {"entr", "ret", 3}, {"kitten", "sitting", 3}, {"abc", "", 3}, {"", "ab", 2}} {
		if got := Levenshtein(c.a, c.b); got != c.want {
			t.Errorf("Levenshtein(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
