package redact

// Secret is a string that never prints.
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "***"
}

// GoString keeps %#v from printing it too.
func (s Secret) GoString() string { return s.String() }

// MarshalText masks the secret in any encoding (config check prints TOML).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads the secret.
func (s *Secret) UnmarshalText(b []byte) error { *s = Secret(b); return nil }

// Reveal answers the secret itself, for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }
