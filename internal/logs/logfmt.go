package logs

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseLogfmt splits one logfmt line into its pairs (for tests and for
// tools that read poligon's log): key=value, a value bare or quoted with
// Go/JSON escapes. A line that is not logfmt is an error.
func ParseLogfmt(line string) (map[string]string, error) {
	out := map[string]string{}
	rest := strings.TrimSpace(line)
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("no key=value at %q", rest)
		}
		key := rest[:eq]
		if strings.ContainsAny(key, " \"") {
			return nil, fmt.Errorf("bad key %q", key)
		}
		rest = rest[eq+1:]
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := 1
			for ; end < len(rest); end++ {
				if rest[end] == '\\' {
					end++
					continue
				}
				if rest[end] == '"' {
					break
				}
			}
			if end >= len(rest) {
				return nil, fmt.Errorf("unterminated quote in %q", key)
			}
			v, err := strconv.Unquote(rest[:end+1])
			if err != nil {
				return nil, fmt.Errorf("value of %q: %v", key, err)
			}
			val, rest = v, rest[end+1:]
		} else {
			sp := strings.IndexByte(rest, ' ')
			if sp < 0 {
				sp = len(rest)
			}
			val, rest = rest[:sp], rest[sp:]
			if strings.ContainsAny(val, `"=`) {
				return nil, fmt.Errorf("bare value of %q holds a quote or '='", key)
			}
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("key %q twice", key)
		}
		out[key] = val
		if rest != "" && rest[0] != ' ' {
			return nil, fmt.Errorf("no space after %q", key)
		}
		rest = strings.TrimLeft(rest, " ")
	}
	return out, nil
}
