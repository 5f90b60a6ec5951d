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

func TestLevenshteinFunc(t *testing.T) {
	vowel := func(x, y rune) bool { return x == y || (x == 'a' && y == 'o') || (x == 'o' && y == 'a') }
	if got := LevenshteinFunc("cat", "cot", vowel); got != 0 {
		t.Errorf("LevenshteinFunc(cat, cot, a=o) = %d, want 0", got)
	}
	if got := LevenshteinFunc("cat", "cut", vowel); got != 1 {
		t.Errorf("LevenshteinFunc(cat, cut, a=o) = %d, want 1", got)
	}
}
