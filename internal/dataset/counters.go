package dataset

import "sync/atomic"

// Counters count what capture did in this process (/metrics
// dataset.counters): a restart zeroes them while the index keeps the run's
// totals. Writer counts the shots it writes and the ones it cannot; the
// capture code counts what never reaches it (NoSession).
type Counters struct {
	Shots               atomic.Int64 // shots written
	ATSPI               atomic.Int64 // ... with a dump
	ATSPIMissing        atomic.Int64 // ... without one
	OCR                 atomic.Int64 // ... with OCR words
	OCRMissing          atomic.Int64 // ... without
	Clicks              atomic.Int64 // ... that are a click or a drag
	ClicksWithoutIntent atomic.Int64 // ... of those, without an intent
	HardScreens         atomic.Int64 // ... showing a tree, toolbar, list or table
	ScreenChanged       atomic.Int64 // ... whose screen moved before the re-check
	Rescaled            atomic.Int64 // ... whose dump was scaled onto the frame
	NoSession           atomic.Int64 // shots whose guest gave no dump (no agent, session, python3 or pyatspi), counted by the caller
	Failed              atomic.Int64 // shots that could not be written (a disk error, a bad frame)
	NoSpace             atomic.Int64 // shots not taken: the volume was below the free-space floor
}

// CounterValues is a snapshot of Counters, as dataset_status and /metrics
// show them.
type CounterValues struct {
	Shots               int64 `json:"shots"`
	ATSPI               int64 `json:"atspi"`
	ATSPIMissing        int64 `json:"atspi_missing"`
	OCR                 int64 `json:"ocr"`
	OCRMissing          int64 `json:"ocr_missing"`
	Clicks              int64 `json:"clicks"`
	ClicksWithoutIntent int64 `json:"clicks_without_intent"`
	HardScreens         int64 `json:"hard_screens"`
	ScreenChanged       int64 `json:"screen_changed"`
	NoSession           int64 `json:"no_session"`
	Rescaled            int64 `json:"rescaled"`
	Failed              int64 `json:"failed"`
	NoSpace             int64 `json:"no_space"`
}

// Snapshot reads every counter.
func (c *Counters) Snapshot() CounterValues {
	return CounterValues{
		Shots: c.Shots.Load(), ATSPI: c.ATSPI.Load(), ATSPIMissing: c.ATSPIMissing.Load(),
		OCR: c.OCR.Load(), OCRMissing: c.OCRMissing.Load(), Clicks: c.Clicks.Load(),
		ClicksWithoutIntent: c.ClicksWithoutIntent.Load(), HardScreens: c.HardScreens.Load(),
		ScreenChanged: c.ScreenChanged.Load(), NoSession: c.NoSession.Load(), Rescaled: c.Rescaled.Load(),
		Failed: c.Failed.Load(), NoSpace: c.NoSpace.Load(),
	}
}

// count adds a written shot's line to the counters.
func (c *Counters) count(l *Line) {
	c.Shots.Add(1)
	bump(l.ATSPI != "", &c.ATSPI, &c.ATSPIMissing)
	bump(l.OCR != "", &c.OCR, &c.OCRMissing)
	if l.IsClick() {
		c.Clicks.Add(1)
		if l.Intent == "" {
			c.ClicksWithoutIntent.Add(1)
		}
	}
	if l.Hard != nil && *l.Hard {
		c.HardScreens.Add(1)
	}
	if l.ScreenChanged != nil && *l.ScreenChanged {
		c.ScreenChanged.Add(1)
	}
	if l.Rescaled != nil {
		c.Rescaled.Add(1)
	}
}

func bump(cond bool, yes, no *atomic.Int64) {
	if cond {
		yes.Add(1)
	} else {
		no.Add(1)
	}
}
