package rfb

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/poligon/poligon/internal/editdist"
)

// Key is one key of a PC keyboard: its qemu sendkey name (a QKeyCode of
// QEMU's qapi/ui.json), the X11 keysym sent on the plain RFB KeyEvent path and
// the PC XT scancode sent on QEMU's ExtendedKeyEvent path (E0-prefixed keys as
// 0x80 | second byte, QEMU's "key number").
type Key struct {
	Name     string
	Keysym   uint32
	Scancode uint32
}

// keyTable lists the keys by qemu sendkey name. The scancodes are QEMU's key
// numbers (the "number" column of QEMU's keymaps/en-us); the keysyms are the
// US layout's unshifted symbols. Keypad digits use the KP_<digit> keysyms:
// QEMU's lock-key-sync turns NumLock on for them, so kp_7 types a 7.
var keyTable = []Key{
	{"esc", 0xff1b, 0x01},
	{"1", '1', 0x02}, {"2", '2', 0x03}, {"3", '3', 0x04}, {"4", '4', 0x05}, {"5", '5', 0x06},
	{"6", '6', 0x07}, {"7", '7', 0x08}, {"8", '8', 0x09}, {"9", '9', 0x0a}, {"0", '0', 0x0b},
	{"minus", '-', 0x0c}, {"equal", '=', 0x0d}, {"backspace", 0xff08, 0x0e}, {"tab", 0xff09, 0x0f},
	{"q", 'q', 0x10}, {"w", 'w', 0x11}, {"e", 'e', 0x12}, {"r", 'r', 0x13}, {"t", 't', 0x14},
	{"y", 'y', 0x15}, {"u", 'u', 0x16}, {"i", 'i', 0x17}, {"o", 'o', 0x18}, {"p", 'p', 0x19},
	{"bracket_left", '[', 0x1a}, {"bracket_right", ']', 0x1b}, {"ret", 0xff0d, 0x1c},
	{"ctrl", 0xffe3, 0x1d},
	{"a", 'a', 0x1e}, {"s", 's', 0x1f}, {"d", 'd', 0x20}, {"f", 'f', 0x21}, {"g", 'g', 0x22},
	{"h", 'h', 0x23}, {"j", 'j', 0x24}, {"k", 'k', 0x25}, {"l", 'l', 0x26},
	{"semicolon", ';', 0x27}, {"apostrophe", '\'', 0x28}, {"grave_accent", '`', 0x29},
	{"shift", 0xffe1, 0x2a}, {"backslash", '\\', 0x2b},
	{"z", 'z', 0x2c}, {"x", 'x', 0x2d}, {"c", 'c', 0x2e}, {"v", 'v', 0x2f}, {"b", 'b', 0x30},
	{"n", 'n', 0x31}, {"m", 'm', 0x32},
	{"comma", ',', 0x33}, {"dot", '.', 0x34}, {"slash", '/', 0x35}, {"shift_r", 0xffe2, 0x36},
	{"kp_multiply", 0xffaa, 0x37}, {"asterisk", 0xffaa, 0x37},
	{"alt", 0xffe9, 0x38}, {"spc", ' ', 0x39}, {"caps_lock", 0xffe5, 0x3a},
	{"f1", 0xffbe, 0x3b}, {"f2", 0xffbf, 0x3c}, {"f3", 0xffc0, 0x3d}, {"f4", 0xffc1, 0x3e},
	{"f5", 0xffc2, 0x3f}, {"f6", 0xffc3, 0x40}, {"f7", 0xffc4, 0x41}, {"f8", 0xffc5, 0x42},
	{"f9", 0xffc6, 0x43}, {"f10", 0xffc7, 0x44},
	{"num_lock", 0xff7f, 0x45}, {"scroll_lock", 0xff14, 0x46},
	{"kp_7", 0xffb7, 0x47}, {"kp_8", 0xffb8, 0x48}, {"kp_9", 0xffb9, 0x49}, {"kp_subtract", 0xffad, 0x4a},
	{"kp_4", 0xffb4, 0x4b}, {"kp_5", 0xffb5, 0x4c}, {"kp_6", 0xffb6, 0x4d}, {"kp_add", 0xffab, 0x4e},
	{"kp_1", 0xffb1, 0x4f}, {"kp_2", 0xffb2, 0x50}, {"kp_3", 0xffb3, 0x51}, {"kp_0", 0xffb0, 0x52},
	{"kp_decimal", 0xffae, 0x53},
	{"sysrq", 0xff15, 0x54}, {"less", '<', 0x56}, {"f11", 0xffc8, 0x57}, {"f12", 0xffc9, 0x58},
	{"kp_equals", 0xffbd, 0x59}, {"lf", 0xff0a, 0x5b},
	{"katakanahiragana", 0xff27, 0x70}, {"ro", '\\', 0x73}, {"hiragana", 0xff25, 0x77},
	{"henkan", 0xff23, 0x79}, {"muhenkan", 0xff22, 0x7b}, {"yen", 0xa5, 0x7d}, {"kp_comma", 0xffac, 0x7e},
	{"audioprev", 0x1008ff16, 0x90}, {"audionext", 0x1008ff17, 0x99},
	{"kp_enter", 0xff8d, 0x9c}, {"ctrl_r", 0xffe4, 0x9d}, {"menu", 0x1008ff65, 0x9e},
	{"audiomute", 0x1008ff12, 0xa0}, {"calculator", 0x1008ff1d, 0xa1}, {"audioplay", 0x1008ff14, 0xa2},
	{"audiostop", 0x1008ff15, 0xa4}, {"volumedown", 0x1008ff11, 0xae}, {"volumeup", 0x1008ff13, 0xb0},
	{"ac_home", 0x1008ff18, 0xb2}, {"kp_divide", 0xffaf, 0xb5}, {"print", 0xff61, 0xb7},
	{"alt_r", 0xffea, 0xb8}, {"pause", 0xff13, 0xc6},
	{"home", 0xff50, 0xc7}, {"up", 0xff52, 0xc8}, {"pgup", 0xff55, 0xc9}, {"left", 0xff51, 0xcb},
	{"right", 0xff53, 0xcd}, {"end", 0xff57, 0xcf}, {"down", 0xff54, 0xd0}, {"pgdn", 0xff56, 0xd1},
	{"insert", 0xff63, 0xd2}, {"delete", 0xffff, 0xd3},
	{"meta_l", 0xffeb, 0xdb}, {"meta_r", 0xffec, 0xdc}, {"compose", 0xff67, 0xdd},
	{"power", 0x1008ff2a, 0xde}, {"sleep", 0x1008ff2f, 0xdf}, {"wake", 0x1008ff2b, 0xe3},
	{"ac_bookmarks", 0x1008ff30, 0xe6}, {"ac_refresh", 0x1008ff73, 0xe7}, {"stop", 0xff69, 0xe8},
	{"ac_forward", 0x1008ff27, 0xe9}, {"ac_back", 0x1008ff26, 0xea}, {"computer", 0x1008ff33, 0xeb},
	{"mail", 0x1008ff19, 0xec},
	{"again", 0xff66, 0x85}, {"props", 0x1005ff70, 0x86}, {"undo", 0xff65, 0x87}, {"front", 0x1005ff71, 0x8c},
	{"copy", 0x1008ff57, 0xf8}, {"open", 0x1008ff6b, 0x64}, {"paste", 0x1008ff6d, 0x65},
	{"find", 0xff68, 0xc1}, {"cut", 0x1008ff58, 0xbc}, {"help", 0xff6a, 0xf5},
}

var keysByName = func() map[string]Key {
	m := make(map[string]Key, len(keyTable))
	for _, k := range keyTable {
		if _, dup := m[k.Name]; dup {
			panic("rfb: duplicate key name " + k.Name)
		}
		m[k.Name] = k
	}
	return m
}()

// keyAliases are names people type that qemu spells differently; they are
// only offered as suggestions, never accepted, so a combo means one thing.
var keyAliases = map[string]string{
	"enter": "ret", "return": "ret", "space": "spc", "escape": "esc", "control": "ctrl",
	"lctrl": "ctrl", "rctrl": "ctrl_r", "lalt": "alt", "ralt": "alt_r", "altgr": "alt_r",
	"lshift": "shift", "rshift": "shift_r", "super": "meta_l", "win": "meta_l", "windows": "meta_l",
	"cmd": "meta_l", "meta": "meta_l", "del": "delete", "ins": "insert", "pageup": "pgup",
	"pagedown": "pgdn", "page_up": "pgup", "page_down": "pgdn", "bksp": "backspace",
	"capslock": "caps_lock", "numlock": "num_lock", "scrolllock": "scroll_lock", "prtsc": "print",
	"printscreen": "print", "period": "dot", "grave": "grave_accent", "backquote": "grave_accent",
	"quote": "apostrophe", "leftbracket": "bracket_left", "rightbracket": "bracket_right",
	"bracketleft": "bracket_left", "bracketright": "bracket_right", "equals": "equal", "dash": "minus",
	"arrowup": "up", "arrowdown": "down", "arrowleft": "left", "arrowright": "right", "break": "pause",
}

// ParseCombo turns a qemu sendkey combination ("ctrl-alt-f2", "shift-tab",
// "ret") into its keys, in the order they are pressed; they are released in
// reverse. Names are case-insensitive. A letter pressed after shift carries
// its upper-case keysym: QEMU's lock-key-sync would otherwise toggle CapsLock
// to make the lower-case keysym come out.
func ParseCombo(combo string) ([]Key, error) {
	if strings.TrimSpace(combo) == "" {
		return nil, fmt.Errorf("empty key combination")
	}
	parts := strings.Split(combo, "-")
	keys := make([]Key, 0, len(parts))
	shifted := false
	for i, part := range parts {
		name := strings.ToLower(strings.TrimSpace(part))
		if name == "" {
			return nil, fmt.Errorf("key combination %q has an empty key name at position %d (write minus for the - key)", combo, i+1)
		}
		k, ok := keysByName[name]
		if !ok {
			return nil, unknownKeyError(combo, parts)
		}
		if k.Name == "shift" || k.Name == "shift_r" {
			shifted = true
		}
		if shifted && k.Keysym >= 'a' && k.Keysym <= 'z' {
			k.Keysym -= 'a' - 'A' // keysyms of Latin letters are their code points
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// unknownKeyError names the whole combination and the parts that are no
// key, and suggests the closest combinations that are (a qemu name written
// with '-' for '_', an alias, a typo), so a mistake is fixed in one step.
func unknownKeyError(combo string, parts []string) error {
	for i := range parts {
		parts[i] = strings.ToLower(strings.TrimSpace(parts[i]))
	}
	known := func(ps []string) bool {
		for _, p := range ps {
			if _, ok := keysByName[p]; !ok {
				return false
			}
		}
		return true
	}
	var unknown []string
	at := -1
	for i, p := range parts {
		if _, ok := keysByName[p]; !ok {
			unknown, at = append(unknown, strconv.Quote(p)), i
		}
	}
	var suggest []string
	add := func(s string) {
		if !slices.Contains(suggest, s) && len(suggest) < 3 {
			suggest = append(suggest, s)
		}
	}
	replace := func(i, j int, name string) string { // parts[i:j] -> name
		return strings.Join(slices.Concat(parts[:i], []string{name}, parts[j:]), "-")
	}
	// A qemu name written with '-' for '_' ("caps-lock", "kp-enter").
	for i := range parts {
		for j := i + 2; j <= len(parts); j++ {
			joined := strings.Join(parts[i:j], "_")
			name, ok := keyAliases[joined]
			if _, isKey := keysByName[joined]; isKey {
				name, ok = joined, true
			}
			if ok && known(parts[:i]) && known(parts[j:]) {
				add(replace(i, j, name))
			}
		}
	}
	// One name mistyped, or a name people use for a qemu one.
	if len(unknown) == 1 {
		for _, name := range closeNames(parts[at]) {
			add(replace(at, at+1, name))
		}
	}
	what := unknown[0] + " is not a qemu key name"
	if n := len(unknown); n > 1 {
		what = strings.Join(unknown[:n-1], ", ") + " and " + unknown[n-1] + " are not qemu key names"
	}
	if len(parts) == 1 {
		what = "" // the combination is the one name
	} else {
		what = ": " + what
	}
	if len(suggest) == 0 {
		return fmt.Errorf("unknown key %q%s (qemu sendkey names: ret, tab, esc, spc, backspace, delete, up, f1..f12, ctrl, alt, shift, meta_l, a..z, 0..9, minus, ...)", combo, what)
	}
	return fmt.Errorf("unknown key %q%s (did you mean %s?)", combo, what, strings.Join(suggest, " or "))
}

// closeNames answers up to 3 key names close to name: the one an alias
// stands for, else those within a small edit distance, closest first.
func closeNames(name string) []string {
	if target, ok := keyAliases[name]; ok {
		return []string{target}
	}
	type candidate struct {
		name string
		dist int
	}
	var best []candidate
	consider := func(candidateName, suggest string) {
		d := editdist.Levenshtein(name, candidateName)
		if d <= max(1, len(name)/3) {
			best = append(best, candidate{suggest, d})
		}
	}
	for _, k := range keyTable {
		consider(k.Name, k.Name)
	}
	for alias, target := range keyAliases {
		consider(alias, target)
	}
	sort.SliceStable(best, func(i, j int) bool {
		if best[i].dist != best[j].dist {
			return best[i].dist < best[j].dist
		}
		return best[i].name < best[j].name
	})
	var names []string
	for _, c := range best {
		if !slices.Contains(names, c.name) && len(names) < 3 {
			names = append(names, c.name)
		}
	}
	return names
}
