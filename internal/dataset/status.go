package dataset

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Status is dataset_status's answer: this process's counters, then what
// the index says — it survives a restart, the counters do not.
type Status struct {
	Enabled   bool          `json:"enabled"`
	Dir       string        `json:"dir,omitempty"`
	FreeMB    int64         `json:"free_mb"`
	MinFreeMB int64         `json:"min_free_mb"`
	Counters  CounterValues `json:"counters"`
	Index     IndexStats    `json:"index"`
	Warnings  []string      `json:"warnings"`
}

// IndexStats is what a capture's index says about it.
type IndexStats struct {
	Lines    int `json:"lines"`
	BadLines int `json:"bad_lines"` // not a JSON line with a shot: a hand edit, a crash mid-append
	Shots    int `json:"shots"`
	Sessions int `json:"sessions"`

	WithATSPI     int     `json:"with_atspi"`
	ATSPICoverage float64 `json:"atspi_coverage"`
	WithOCR       int     `json:"with_ocr"`
	OCRCoverage   float64 `json:"ocr_coverage"`
	// ATSPIMissing is why dumps are missing: atspi_error -> shots (the
	// 20 most frequent; the rest under "(other)").
	ATSPIMissing map[string]int `json:"atspi_missing"`

	Clicks              int `json:"clicks"` // clicks and drags
	ClicksWithIntent    int `json:"clicks_with_intent"`
	ClicksWithoutIntent int `json:"clicks_without_intent"`
	Rescaled            int `json:"rescaled"`
	ScreenChanged       int `json:"screen_changed"`

	ByLocale map[string]int `json:"by_locale"`
	ByTheme  map[string]int `json:"by_theme"`
	ByApp    map[string]int `json:"by_app"`
	ByOrigin map[string]int `json:"by_origin"`

	Hard
}

// Hard is the share of screens showing a tree, toolbar, list or table,
// counted over the shots with a dump (without a widget tree there is
// nothing to tell). Rows written before the index carried a hard flag are
// told from their sidecar; those that cannot be told are HardUnknown and
// make the share a lower bound, rather than counted as not hard.
type Hard struct {
	HardScreens          int     `json:"hard_screens"`
	HardScreenBase       int     `json:"hard_screen_base"`
	HardScreenShare      float64 `json:"hard_screen_share"`
	HardScreenTarget     float64 `json:"hard_screen_target"`
	HardUnknown          int     `json:"hard_unknown"`
	HardScreenLowerBound bool    `json:"hard_screen_lower_bound"`
}

// SidecarBudget bounds how many dumps one StatusOf call reads to tell
// whether an old row (no hard flag in the index) shows a hard screen.
const SidecarBudget = 200

// StatusOf answers dataset_status for a capture directory: counters are
// this process's (Writer.Counters.Snapshot()), minFreeMB the floor.
func StatusOf(dir string, counters CounterValues, minFreeMB int64) (*Status, error) {
	st := &Status{Enabled: true, Dir: dir, MinFreeMB: minFreeMB, Counters: counters, Warnings: []string{}}
	idx, err := ReadStats(dir, SidecarBudget)
	if err != nil {
		return nil, err
	}
	st.Index = *idx
	st.Warnings = append(st.Warnings, idx.warnings()...)
	free, err := FreeBytes(dir)
	if err != nil {
		return nil, err
	}
	if st.FreeMB = int64(free >> 20); st.FreeMB < minFreeMB {
		st.Warnings = append(st.Warnings, fmt.Sprintf("capture is stopped: %d MB free, below the %d MB floor (no_space)", st.FreeMB, minFreeMB))
	}
	if counters.ClicksWithoutIntent > 0 {
		st.Warnings = append(st.Warnings, fmt.Sprintf("%d clicks captured without an intent: they are not training pairs", counters.ClicksWithoutIntent))
	}
	return st, nil
}

// ReadStats reads a capture's index, reading at most sidecarBudget dumps
// for rows without a hard flag.
func ReadStats(dir string, sidecarBudget int) (*IndexStats, error) {
	s := &IndexStats{ByLocale: map[string]int{}, ByTheme: map[string]int{}, ByApp: map[string]int{}, ByOrigin: map[string]int{}}
	s.HardScreenTarget = HardScreenTarget
	sessions := map[string]bool{}
	missing := map[string]int{}
	err := ReadIndex(filepath.Join(dir, IndexName), func(e IndexEntry) error {
		s.Lines++
		if e.Err != nil {
			s.BadLines++
			return nil
		}
		l := &e.Line
		s.Shots++
		sessions[sessionOf(l)] = true
		if l.ATSPI != "" {
			s.WithATSPI++
			hard, known := l.Hard, l.Hard != nil
			if !known && sidecarBudget > 0 {
				sidecarBudget--
				hard, known = hardFromSidecar(dir, l.ATSPI)
			}
			s.HardScreenBase++
			switch {
			case !known:
				s.HardUnknown++
			case *hard:
				s.HardScreens++
			}
		} else {
			missing[cmp.Or(l.ATSPIError, "(no reason written)")]++
		}
		if l.OCR != "" {
			s.WithOCR++
		}
		if l.IsClick() {
			s.Clicks++
			if l.Intent != "" {
				s.ClicksWithIntent++
			} else {
				s.ClicksWithoutIntent++
			}
		}
		if l.Rescaled != nil {
			s.Rescaled++
		}
		if l.ScreenChanged != nil && *l.ScreenChanged {
			s.ScreenChanged++
		}
		count(s.ByLocale, NormalizeLocale(l.Locale))
		count(s.ByTheme, l.Theme)
		count(s.ByApp, l.App)
		count(s.ByOrigin, l.Origin)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dataset index: %w", err)
	}
	s.Sessions = len(sessions)
	s.ATSPICoverage = share(s.WithATSPI, s.Shots)
	s.OCRCoverage = share(s.WithOCR, s.Shots)
	s.ATSPIMissing = topN(missing, 20)
	s.HardScreenShare = share(s.HardScreens, s.HardScreenBase)
	s.HardScreenLowerBound = s.HardUnknown > 0
	return s, nil
}

func (s *IndexStats) warnings() []string {
	var w []string
	if s.BadLines > 0 {
		w = append(w, fmt.Sprintf("%d index lines cannot be read (the exporter skips them as bad_line)", s.BadLines))
	}
	if s.ClicksWithoutIntent > 0 {
		w = append(w, fmt.Sprintf("%d clicks in the index have no intent: the exporter skips them", s.ClicksWithoutIntent))
	}
	if s.Shots > 0 && s.ATSPICoverage < 0.5 {
		w = append(w, fmt.Sprintf("only %.0f%% of the shots have an AT-SPI dump: see atspi_missing for why", 100*s.ATSPICoverage))
	}
	w = append(w, s.Hard.warnings()...)
	return w
}

func (h *Hard) warnings() []string {
	if h.HardScreenBase == 0 || h.HardScreenShare >= HardScreenTarget {
		return nil
	}
	bound := ""
	if h.HardScreenLowerBound {
		bound = fmt.Sprintf(" (at least: %d not told)", h.HardUnknown)
	}
	return []string{fmt.Sprintf("%.0f%% of the screens with a dump show a tree, toolbar, list or table%s, below the %.0f%% target: capture more of them",
		100*h.HardScreenShare, bound, 100*HardScreenTarget)}
}

// hardFromSidecar tells an old row's hardness from its dump; known is
// false when the dump cannot be read (or leaves the capture).
func hardFromSidecar(dir, rel string) (hard *bool, known bool) {
	path, err := confined(dir, rel, ATSPISuffix)
	if err != nil {
		return nil, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	d, err := ParseDump(b)
	if err != nil {
		return nil, false
	}
	h := d.Hard()
	return &h, true
}

// sessionOf answers a line's session: its own, or its shot's directory.
func sessionOf(l *Line) string {
	if l.Session != "" {
		return l.Session
	}
	return filepath.Dir(filepath.FromSlash(l.Shot))
}

func count(m map[string]int, key string) {
	m[cmp.Or(key, "unknown")]++
}

func share(part, whole int) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// topN keeps the n largest counts, the rest summed under "(other)".
func topN(m map[string]int, n int) map[string]int {
	if len(m) <= n {
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	out := map[string]int{}
	for i, k := range keys {
		if i < n {
			out[k] = m[k]
		} else {
			out["(other)"] += m[k]
		}
	}
	return out
}
