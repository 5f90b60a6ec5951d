package pve

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// flexInt decodes PVE's numbers, which may arrive as JSON numbers or as
// strings ("105", nextid and vncproxy's port); null and "" are 0, and a
// boolean is 0 or 1.
type flexInt int64

func (n *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(bytes.TrimSpace(b)), `"`)
	switch s {
	case "", "null", "false":
		*n = 0
		return nil
	case "true":
		*n = 1
		return nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		*n = flexInt(i)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("not a number: %s", b)
	}
	*n = flexInt(f)
	return nil
}

// flexBool decodes PVE's booleans: 0/1, "0"/"1" or true/false.
type flexBool bool

func (v *flexBool) UnmarshalJSON(b []byte) error {
	switch strings.Trim(string(bytes.TrimSpace(b)), `"`) {
	case "1", "true", "on", "yes":
		*v = true
	case "0", "false", "off", "no", "", "null":
		*v = false
	default:
		return fmt.Errorf("not a boolean: %s", b)
	}
	return nil
}

// pveBytes undoes how PVE hands on bytes it decoded from the agent
// (exec-status out-data/err-data, file-read content): its JSON encoder
// takes every byte as the character of the same number, so UTF-8 arrives
// "mangled" as latin-1. When every character is at most U+00FF, they are
// the bytes; otherwise (a PVE that sends proper UTF-8) the text is taken
// as it is.
func pveBytes(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xFF {
			return []byte(s)
		}
		out = append(out, byte(r))
	}
	return out
}

// latin1 is the reverse, for input-data: each byte becomes one character
// of the same number, which PVE turns back into that byte when it
// base64-encodes the value for the agent.
func latin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
