package dataset

// The stable codes report.json counts a skipped index line under
// (skipped), and a dump or OCR file left out of an exported shot under
// (atspi_dropped, ocr_dropped). The prose is in skip_details.
const (
	SkipBadLine       = "bad_line"        // not a JSON line with a shot
	SkipPathRefused   = "path_refused"    // a path absolute, with .., through a symlink, or of the wrong kind
	SkipDuplicate     = "duplicate"       // a file an earlier line already exported
	SkipEvalSession   = "eval_session"    // its session is in the benchmark
	SkipEvalFrame     = "eval_frame"      // the frame shows a benchmark frame's screen
	SkipScreenChanged = "screen_changed"  // the frame and the dump are from different moments
	SkipNoIntent      = "no_intent"       // a click or a drag with no stated goal
	SkipNotClick      = "not_click"       // --clicks-only
	SkipLocale        = "filtered_locale" // --locale
	SkipTheme         = "filtered_theme"  // --theme
	SkipApp           = "filtered_app"    // --app
	SkipShotMissing   = "shot_missing"    // the PNG is not on disk
	SkipShotBad       = "shot_unreadable" // the PNG does not decode
	SkipNoTruth       = "no_ground_truth" // neither a usable dump nor OCR words

	// A dump that is not usable: with --require-atspi the shot is skipped
	// under this code, without it the shot goes out on its OCR alone.
	ATSPINone        = "atspi_none"        // the index has no dump (installer, boot menu, no session)
	ATSPIMissing     = "atspi_missing"     // the dump is not on disk
	ATSPIUnreadable  = "atspi_unreadable"  // not a dump
	ATSPIErrorOnly   = "atspi_error_only"  // it only reports an error
	ATSPIEmpty       = "atspi_empty"       // no widgets
	ATSPISizes       = "size_mismatch"     // guest and frame sizes differ with no rescaled note
	ATSPIUnplaceable = "atspi_unplaceable" // a logical (Wayland) dump with no root widget to size it by

	OCRMissing    = "ocr_missing"    // the index names an OCR file that is not on disk
	OCRUnreadable = "ocr_unreadable" // not x y w h text conf lines
)

// Report is report.json: what an export holds and what it left out.
type Report struct {
	Format      string   `json:"format"` // reportFormat: how a later --force knows a previous export
	Dataset     string   `json:"dataset"`
	Out         string   `json:"out"`
	Tar         string   `json:"tar,omitempty"`
	Eval        string   `json:"eval,omitempty"`
	EvalCheck   string   `json:"eval_check"` // pixels (perceptual and byte match), or none (--no-eval)
	EvalFrames  int      `json:"eval_frames"`
	EvalBad     int      `json:"eval_unreadable"` // benchmark images that matched by bytes only
	Seed        int64    `json:"seed"`
	ValFraction float64  `json:"val_fraction"`
	Filters     Filters  `json:"filters"`
	DryRun      bool     `json:"dry_run"`
	Warnings    []string `json:"warnings"`

	Lines    int `json:"lines"`
	Exported int `json:"exported"`
	// Skipped counts the lines left out by stable code; SkipDetails says
	// why for each (the first maxDetails of them).
	Skipped       map[string]int `json:"skipped"`
	SkipDetails   []SkipDetail   `json:"skip_details"`
	DetailsCut    int            `json:"skip_details_cut,omitempty"`
	ATSPIDropped  map[string]int `json:"atspi_dropped"` // exported without their dump, by code
	OCRDropped    map[string]int `json:"ocr_dropped"`
	Train         Split          `json:"train"`
	Val           Split          `json:"val"`
	WithATSPI     int            `json:"with_atspi"`
	WithOCR       int            `json:"with_ocr"`
	Clicks        int            `json:"clicks"`
	ClicksIntent  int            `json:"clicks_with_intent"`
	Drags         int            `json:"drags"`
	PlacedLogical int            `json:"placed_logical"` // Wayland dumps this export scaled onto their frame
	ByLocale      map[string]int `json:"by_locale"`
	ByTheme       map[string]int `json:"by_theme"`
	ByApp         map[string]int `json:"by_app"`
	ByOrigin      map[string]int `json:"by_origin"`
	Hard
	TookMS int64 `json:"took_ms"`
}

// Filters are the options that decide which shots go out.
type Filters struct {
	RequireATSPI bool     `json:"require_atspi"`
	ClicksOnly   bool     `json:"clicks_only"`
	Locale       []string `json:"locale"`
	Theme        []string `json:"theme"`
	App          []string `json:"app"`
}

// Split is one half of the export.
type Split struct {
	Sessions int    `json:"sessions"`
	Frames   int    `json:"frames"`
	Index    string `json:"index"` // its index file, relative to the export
}

// SkipDetail is one skipped line, in prose.
type SkipDetail struct {
	Line   int    `json:"line"`
	Shot   string `json:"shot,omitempty"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// reportFormat marks report.json as an export's.
const reportFormat = "poligon-dataset-export/1"

// maxDetails bounds skip_details, so a capture of a million bad lines
// does not make a million-line report.
const maxDetails = 1000
