package owner

import "testing"

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{"Ivan.Petrov": "ivanpetrov", "alice": "alice", "Bob_2": "bob2", "Žan": "an", "...": ""} {
		if got := Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
		if Valid(in) != (in == want && want != "") {
			t.Errorf("Valid(%q) = %v", in, Valid(in))
		}
	}
}
