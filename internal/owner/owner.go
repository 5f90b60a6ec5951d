// Package owner is the one rule for owner names: who a VM belongs to is
// in its name (<owner>-repro-...), so an owner name is lowercase letters
// and digits only, whatever the user name it came from.
package owner

import "strings"

// Sanitize lowercases a user name and keeps only [a-z0-9]: the rule the
// manual gives for PVE token users (Ivan.Petrov -> ivanpetrov).
func Sanitize(user string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(user) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Valid reports whether name is an owner name as Sanitize leaves one.
func Valid(name string) bool { return name != "" && Sanitize(name) == name }
