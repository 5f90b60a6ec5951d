package app

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/dataset"
)

// openDataset makes the training-dataset capture the config asks for
// ([dataset] dir); nil when it asks for none.
func openDataset(cfg config.Dataset, log *slog.Logger) (*hostapi.Dataset, error) {
	if !cfg.Capturing() {
		return nil, nil
	}
	w, err := dataset.NewWriter(cfg.Dir, int64(cfg.MinFreeMB))
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	return &hostapi.Dataset{Writer: w, Agent: cfg.Agent, Mode: cfg.Mode(), Log: log}, nil
}

// datasetProblems: a capture directory that went away (an unmounted
// volume) keeps the instance from capturing as configured.
func (a *App) datasetProblems() []string {
	d := a.Env.Dataset
	if d == nil {
		return nil
	}
	if fi, err := os.Stat(d.Writer.Dir()); err != nil || !fi.IsDir() {
		return []string{"dataset directory is gone (an unmounted volume?)"}
	}
	return nil
}
