package rfb

import (
	"fmt"
	"unicode/utf8"
)

// Stroke is how one character is typed on the US layout: Hold (Shift, or
// nothing) is held down around Key.
type Stroke struct {
	Char rune
	Hold []Key
	Key  Key
}

// usShifted maps each shifted US-layout symbol to the key that carries it.
var usShifted = map[rune]string{
	'!': "1", '@': "2", '#': "3", '$': "4", '%': "5", '^': "6", '&': "7", '*': "8", '(': "9", ')': "0",
	'_': "minus", '+': "equal", '{': "bracket_left", '}': "bracket_right", '|': "backslash",
	':': "semicolon", '"': "apostrophe", '<': "comma", '>': "dot", '?': "slash", '~': "grave_accent",
}

// usPlain maps the unshifted non-alphanumeric characters to their keys.
var usPlain = map[rune]string{
	' ': "spc", '\n': "ret", '\r': "ret", '\t': "tab",
	'-': "minus", '=': "equal", '[': "bracket_left", ']': "bracket_right", '\\': "backslash",
	';': "semicolon", '\'': "apostrophe", ',': "comma", '.': "dot", '/': "slash", '`': "grave_accent",
}

// TextStrokes turns text into keystrokes on the US layout: Shift is held for
// capitals and the shifted symbols, "\n" (or "\r\n", or "\r") is ret, "\t" is
// tab. A character no US key types is an error naming its position (never
// the character: the text may be a password), so callers can refuse the
// whole text before sending anything.
//
// The keysym of a shifted key is the character itself ('A', '!'): QEMU's
// lock-key-sync compares a letter keysym's case with the Shift state and
// would toggle CapsLock if they disagreed.
func TextStrokes(text string) ([]Stroke, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("text is not valid UTF-8")
	}
	shift := keysByName["shift"]
	strokes := make([]Stroke, 0, len(text))
	pos := 0
	var prev rune
	for _, r := range text {
		pos++
		if r == '\n' && prev == '\r' { // "\r\n" is one line break
			prev = r
			continue
		}
		prev = r
		s := Stroke{Char: r}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			s.Key = keysByName[string(r)]
		case r >= 'A' && r <= 'Z':
			s.Key = keysByName[string(r-'A'+'a')]
			s.Key.Keysym = uint32(r)
			s.Hold = []Key{shift}
		default:
			if name, ok := usPlain[r]; ok {
				s.Key = keysByName[name]
			} else if name, ok := usShifted[r]; ok {
				s.Key = keysByName[name]
				s.Key.Keysym = uint32(r) // ASCII keysyms are their code points
				s.Hold = []Key{shift}
			} else {
				// The character itself stays out: the text may be a
				// password, and this error reaches audit logs.
				return nil, fmt.Errorf("character %d of the text is not on the US keyboard layout", pos)
			}
		}
		strokes = append(strokes, s)
	}
	return strokes, nil
}
