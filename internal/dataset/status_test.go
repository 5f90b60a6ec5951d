package dataset_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/dataset"
	"github.com/poligon/poligon/internal/dataset/datasettest"
)

func TestStatusFromIndex(t *testing.T) {
	dir := t.TempDir()
	// 4 sessions x 6 shots: ru and en, light and dark; seeds 0..23, even ones hard.
	if _, err := datasettest.Capture(dir, datasettest.Spec{Sessions: 4, ShotsPerSession: 6, W: 320, H: 200}); err != nil {
		t.Fatal(err)
	}
	w, _ := dataset.NewWriter(dir, 0)
	scr := datasettest.Draw(101, 320, 200) // odd: not hard
	frame := datasettest.PNG(scr.Image)
	extra := []dataset.Shot{
		{Session: "s9", Agent: "a", PNG: frame, ATSPI: []byte(`{"error":"no desktop session for user test (0 processes)","widgets":[]}`),
			Line: dataset.Line{Click: &[2]int{1, 1}, Origin: "ui_click", Locale: "ru_RU"}}, // no intent
		{Session: "s9", Agent: "a", PNG: frame, Line: dataset.Line{ATSPIError: "installer", Origin: "ui_screenshot", Locale: "ru"}},
	}
	for _, s := range extra {
		if _, err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	// Two rows from before the index had a hard flag: one hard (seed 0), one not (seed 1).
	index := filepath.Join(dir, dataset.IndexName)
	b, _ := os.ReadFile(index)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, i := range []int{0, 1} {
		var m map[string]any
		json.Unmarshal([]byte(lines[i]), &m)
		delete(m, "hard")
		out, _ := json.Marshal(m)
		lines[i] = string(out)
	}
	lines = append(lines, `{"shot": broken`)
	os.WriteFile(index, []byte(strings.Join(lines, "\n")+"\n"), 0o640)

	st, err := dataset.StatusOf(dir, w.Counters.Snapshot(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ix := st.Index
	if ix.Lines != 27 || ix.BadLines != 1 || ix.Shots != 26 || ix.Sessions != 5 || ix.WithATSPI != 24 || ix.WithOCR != 26 {
		t.Fatalf("index %+v", ix)
	}
	if ix.ATSPIMissing["no desktop session for user test (0 processes)"] != 1 || ix.ATSPIMissing["installer"] != 1 {
		t.Fatalf("why dumps are missing: %v", ix.ATSPIMissing)
	}
	if ix.ByLocale["ru"] != 14 || ix.ByLocale["en"] != 12 || len(ix.ByLocale) != 2 {
		t.Fatalf("by locale (normalized): %v", ix.ByLocale)
	}
	if ix.Clicks != 9 || ix.ClicksWithIntent != 8 || ix.ClicksWithoutIntent != 1 {
		t.Fatalf("clicks %d with %d without %d", ix.Clicks, ix.ClicksWithIntent, ix.ClicksWithoutIntent)
	}
	// 24 dumps, 12 hard; the two old rows told from their sidecars.
	if ix.HardScreens != 12 || ix.HardScreenBase != 24 || ix.HardUnknown != 0 || ix.HardScreenLowerBound || ix.HardScreenShare != 0.5 {
		t.Fatalf("hard %+v", ix.Hard)
	}
	if st.Counters.ClicksWithoutIntent != 1 || st.Counters.ATSPIMissing != 2 {
		t.Fatalf("counters %+v", st.Counters)
	}

	// With no budget to read sidecars, the old rows are unknown and the
	// share a lower bound.
	ix2, err := dataset.ReadStats(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ix2.HardScreens != 11 || ix2.HardUnknown != 2 || !ix2.HardScreenLowerBound || ix2.HardScreenBase != 24 {
		t.Fatalf("hard without sidecars %+v", ix2.Hard)
	}
	// A capture with few hard screens warns.
	sparse := t.TempDir()
	w3, _ := dataset.NewWriter(sparse, 0)
	for seed := int64(1); seed < 8; seed += 2 {
		s := datasettest.Draw(seed, 320, 200)
		w3.Write(dataset.Shot{Session: "s", Agent: "a", PNG: datasettest.PNG(s.Image), ATSPI: datasettest.DumpJSON(s, "en")})
	}
	st3, _ := dataset.StatusOf(sparse, w3.Counters.Snapshot(), 0)
	if !slices.ContainsFunc(st3.Warnings, func(s string) bool { return strings.Contains(s, "below the 30% target") }) {
		t.Fatalf("no warning below the target: %v", st3.Warnings)
	}
	if _, err := json.Marshal(st); err != nil {
		t.Fatal(err)
	}
}
