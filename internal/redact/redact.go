// Package redact is the one rule for which values are secrets and what
// stands in for them: the audit log, transcripts and script logs share it.
package redact

import (
	"fmt"
	"regexp"
)

// secretName matches argument and param names whose values are secrets
// wherever they appear (password, root_pass, api_token, ssh_key, ...).
var secretName = regexp.MustCompile(`(?i)pass|secret|token|key$|credential`)

// IsSecretName reports whether a value named name is a secret.
func IsSecretName(name string) bool { return secretName.MatchString(name) }

// Placeholder is what stands in for a secret value: its size, never its
// bytes.
func Placeholder(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("<redacted %d bytes>", len(s))
	}
	return "<redacted>"
}
