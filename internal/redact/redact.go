// Package redact is the one rule for which values are secrets and what
// stands in for them: the audit log, transcripts and script logs share it.
package redact

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
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

// A shell value as a command writes it: quoted, or up to a blank or an
// operator.
const shellValue = `'[^']*'|"(?:[^"\\]|\\.)*"|[^\s;&|'"()<>]+`

// commandRule finds a secret in a command: group v is the value; group
// name, where the rule has one, must be a secret name; when, if set, is a
// word the command must hold.
type commandRule struct {
	re   *regexp.Regexp
	when string
}

var commandRules = []commandRule{
	// NAME=value, --name=value, name: value (a header, an env file)
	{re: regexp.MustCompile(`(?:^|[\s'"({,;&|])-{0,2}(?P<name>[A-Za-z_][\w.-]*)(?:=|:[ \t]*)(?P<v>` + shellValue + `)`)},
	// --name value, -name value
	{re: regexp.MustCompile(`(?:^|\s)--?(?P<name>[A-Za-z][\w.-]*)[ \t]+(?P<v>[^-\s;&|'"()<>][^\s;&|'"()<>]*|'[^']*'|"(?:[^"\\]|\\.)*")`)},
	// scheme://user:password@host
	{re: regexp.MustCompile(`[A-Za-z][\w+.-]*://[^\s/:@'"]*:(?P<v>[^\s/@'"]+)@`)},
	// Authorization: <scheme> credentials, and any bearer token
	{re: regexp.MustCompile(`(?i)\bauthorization:[ \t]*(?:(?:basic|bearer|token|digest)[ \t]+)?(?P<v>[^\s'"]+)`)},
	{re: regexp.MustCompile(`(?i)\bbearer[ \t]+(?P<v>[^\s'"]+)`)},
	// curl -u user:password, sshpass -p password
	{re: regexp.MustCompile(`(?:^|\s)(?:-u|--user)[ \t]+['"]?[^\s:'"]+:(?P<v>[^\s'"]+)`)},
	{re: regexp.MustCompile(`\bsshpass[ \t]+-p[ \t]*(?P<v>` + shellValue + `)`)},
	// user:password lines fed to chpasswd
	{re: regexp.MustCompile(`(?:^|[\s'"])[\w.-]+:(?P<v>[^\s'"|;&<>/][^\s'"|;&<>]*)`), when: "chpasswd"},
}

// Command answers a shell command with every secret it visibly carries
// replaced by its Placeholder: values of secret-named variables and
// options (PGPASSWORD=x, --password x, api_token: x), URL passwords,
// Authorization and bearer credentials, curl -u and sshpass -p passwords,
// and user:password lines for chpasswd. The rest stays as written, so a
// label still says what ran.
func Command(cmd string) string {
	type span struct{ from, to int }
	var spans []span
	for _, r := range commandRules {
		if !strings.Contains(cmd, r.when) {
			continue
		}
		name, v := r.re.SubexpIndex("name"), r.re.SubexpIndex("v")
		for _, m := range r.re.FindAllStringSubmatchIndex(cmd, -1) {
			if name >= 0 && !IsSecretName(cmd[m[2*name]:m[2*name+1]]) {
				continue
			}
			spans = append(spans, span{m[2*v], m[2*v+1]})
		}
	}
	// By start, the longest first: a shorter find inside it is skipped.
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].from != spans[j].from {
			return spans[i].from < spans[j].from
		}
		return spans[i].to > spans[j].to
	})
	var b strings.Builder
	at := 0
	for _, s := range spans {
		if s.from < at {
			continue // inside one already replaced
		}
		b.WriteString(cmd[at:s.from])
		b.WriteString(Placeholder(cmd[s.from:s.to]))
		at = s.to
	}
	b.WriteString(cmd[at:])
	return b.String()
}
