package benches

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

// OpenEyes makes the process's screen reading from the config: the OCR
// reader (its engines start on first use), and the vision and grounding
// clients when their endpoints are set. close releases them.
func OpenEyes(cfg *config.Config, log *slog.Logger) (eyes *hostapi.Eyes, close func(), err error) {
	e := &hostapi.Eyes{SeeAlways: cfg.Vision.SeeAlways}
	var events *vision.Events
	closers := []func(){}
	close = func() {
		for _, c := range closers {
			c()
		}
	}
	if !cfg.OCR.Disabled {
		e.OCR = ocr.New(ocr.Config{Languages: cfg.OCR.Languages, Workers: cfg.OCR.Workers})
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
