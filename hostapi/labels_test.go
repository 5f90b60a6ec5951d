package hostapi

import (
	"image"
	"testing"
)

func TestFoldLabel(t *testing.T) {
	for in, want := range map[string]string{
		"OK":               "ok",
		"ок":               "ok", // Cyrillic o and k, as OCR reads "OK"
		"  Username:  ":    "username",
		"Save   As…":       "save as",
		"Далее >":          "дaлee", // а and е fold to Latin; д and л have no look-alike
		"ＯＫ":               "ok",    // full-width, by NFKC
		"[ Cancel ]":       "cancel",
		"Ёлка":             "eлka",
		"Выбранная строка": "bыбpaннaя cтpoka", // н and т are read as more than one Latin letter: see readAs
	} {
		if got := foldLabel(in); got != want {
			t.Errorf("foldLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func spots(texts ...string) []candidate {
	var out []candidate
	for i, s := range texts {
		out = append(out, candidate{Spot: Spot{Box: image.Rect(0, 20*i, 50, 20*i+10), Text: s}, folded: foldLabel(s)})
	}
	return out
}

func TestBestSpots(t *testing.T) {
	for _, c := range []struct {
		label string
		cands []string
		want  []string
	}{
		{"OK", []string{"ОК", "Cancel"}, []string{"ОК"}},                               // Cyrillic OCR reading
		{"Cancel", []string{"Cancle", "Cancel"}, []string{"Cancel"}},                   // exact beats near
		{"Cancel", []string{"Cancol"}, []string{"Cancol"}},                             // one edit at 6 letters
		{"OK", []string{"OX"}, nil},                                                    // no edit under 4 letters
		{"Password", []string{"Pasword", "Passw0rd"}, []string{"Pasword", "Passw0rd"}}, // equally near: both
		{"Installer", []string{"Instal1er", "Installer now"}, []string{"Instal1er"}},
		{"Next", []string{"Text"}, []string{"Text"}}, // one edit: the caller sees what was read
		// OCR reading Latin words as Cyrillic letters (seen on real screens),
		// and Cyrillic words with Latin letters: look-alikes cost nothing.
		{"garden", []string{"загдет", "gate"}, []string{"загдет"}},
		{"drawer", []string{"дгашег"}, []string{"дгашег"}},
		{"BusyBox", []string{"ВизуВох"}, []string{"ВизуВох"}},
		{"Назад", []string{"Hasad", "Hасос"}, []string{"Hasad"}},
		{"Где", []string{"rдe"}, []string{"rдe"}},
		{"Пуск", []string{"nyck"}, []string{"nyck"}},
		{"garden", []string{"загдет", "garden"}, []string{"garden"}}, // the exact reading wins
		{"gas", []string{"sas"}, nil},                                // Latin letters stay themselves
	} {
		got := bestSpots(c.label, spots(c.cands...))
		var texts []string
		for _, s := range got {
			texts = append(texts, s.Text)
		}
		if len(texts) != len(c.want) || (len(texts) > 0 && (texts[0] != c.want[0] || texts[len(texts)-1] != c.want[len(c.want)-1])) {
			t.Errorf("bestSpots(%q, %q) = %q, want %q", c.label, c.cands, texts, c.want)
		}
	}
}
