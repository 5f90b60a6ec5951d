package app

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/poligon/poligon/backends/ocr"
	"github.com/poligon/poligon/backends/vision"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
)

// Eyes are the process's screen readers as the app made them: the
// clients themselves, for reports and metrics. Env.Eyes is hostapi's view
// of the same.
type Eyes struct {
	OCR       *ocr.Reader    // nil: no OCR
	Vision    *vision.Client // nil: no vision model
	Grounding *vision.Client // nil: the vision model grounds too
	// Events records the models' failures (POLIGON_MCP_EVENTS); nil: none.
	Events    *vision.Events
	SeeAlways bool
}

// hostapi answers the eyes as hostapi uses them (an absent client stays a
// nil interface).
func (e *Eyes) hostapi() *hostapi.Eyes {
	h := &hostapi.Eyes{SeeAlways: e.SeeAlways}
	if e.OCR != nil {
		h.OCR = e.OCR
	}
	if e.Vision != nil {
		h.Vision = e.Vision
	}
	if e.Grounding != nil {
		h.Grounding = e.Grounding
	}
	return h
}

// openEyes makes the process's screen reading from the config: the OCR
// reader (its engines start on first use), and the vision and grounding
// clients when their endpoints are set. close releases them.
func openEyes(cfg *config.Config, log *slog.Logger) (eyes *Eyes, close func(), err error) {
	e := &Eyes{SeeAlways: cfg.Vision.SeeAlways}
	var events *vision.Events
	closers := []func(){}
	close = func() {
		for _, c := range closers {
			c()
		}
	}
	if !cfg.OCR.Disabled {
		atlas := "" // the glyphs OCR learned, kept across restarts beside the store
		if cfg.StateDir != "" {
			atlas = filepath.Join(cfg.StateDir, "ocr-atlas")
		}
		e.OCR = ocr.New(ocr.Config{Languages: cfg.OCR.Languages, Workers: cfg.OCR.Workers, AtlasFile: atlas})
		closers = append(closers, e.OCR.Close)
	}
	if cfg.Events.Dir != "" && (cfg.Vision.Configured() || cfg.Grounding.Configured()) {
		if events, err = vision.OpenEvents(cfg.Events.Dir, cfg.Events.Samples, cfg.Events.MaxMB); err != nil {
			close()
			return nil, nil, err
		}
		closers = append(closers, func() { events.Close() })
		e.Events = events
	}
	capped := ""
	if cfg.EvidenceDir != "" {
		capped = filepath.Join(cfg.EvidenceDir, "vision-capped")
	}
	client := func(purpose string, m config.Model) (*vision.Client, error) {
		if !m.Configured() {
			return nil, nil
		}
		var opts json.RawMessage
		if m.Options != "" {
			opts = json.RawMessage(m.Options)
		}
		c, err := vision.New(vision.Endpoint{
			Purpose: purpose, URL: m.API, Key: m.Key.Reveal(), Model: m.Model, Coords: m.Coords,
			Resize: m.Resize, MaxPixels: m.MaxPixels, Options: opts, MaxTokens: m.MaxTokens, Timeout: m.Timeout.Duration,
		}, vision.Options{Log: log, Events: events, CappedDir: capped})
		if err != nil {
			return nil, fmt.Errorf("%s model: %w", purpose, err)
		}
		return c, nil
	}
	if e.Vision, err = client("vision", cfg.Vision); err == nil {
		e.Grounding, err = client("grounding", cfg.Grounding)
	}
	if err != nil {
		close()
		return nil, nil, err
	}
	return e, close, nil
}

// EyesReport answers which eyes this instance has, for /readyz and the
// startup log. Unavailable OCR is reported, not a readiness problem: a
// server whose users never read the screen serves as configured without
// tesseract. It loads nothing.
func (a *App) EyesReport() map[string]any {
	e := a.Eyes
	out := map[string]any{"ocr": false, "vision": false, "grounding": false, "see_always": false}
	if e == nil {
		return out
	}
	if e.OCR != nil {
		if err := e.OCR.Available(); err != nil {
			out["ocr_unavailable"] = err.Error()
		} else {
			out["ocr"] = true
			out["ocr_languages"] = e.OCR.Languages()
		}
	}
	out["vision"] = e.Vision != nil
	out["grounding"] = e.Grounding != nil || e.Vision != nil
	out["see_always"] = e.SeeAlways
	return out
}

// eyesProblems are the eyes' readiness problems: see-always without a
// vision model cannot serve as configured (config check refuses it too).
func (a *App) eyesProblems() []string {
	if e := a.Eyes; e != nil && e.SeeAlways && e.Vision == nil {
		return []string{"see_always is on but no vision model is configured"}
	}
	return nil
}
