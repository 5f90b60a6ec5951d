package engine

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poligon/poligon/internal/dataset"
)

// The training dataset (README: Training dataset): dataset_status for an
// operator or an agent in the middle of a capture run, and what /metrics
// says of it (dataset.counters). The capture itself is hostapi's.

type datasetStatusArgs struct{}

func datasetTools() []*Tool {
	return []*Tool{
		newTool(Def{Name: "dataset_status", Toolset: "dataset", Title: "Training-dataset capture status", NoBench: true,
			Description: "The training-dataset capture as JSON: this process's counters, then the index's shots, sessions, AT-SPI/OCR coverage, clicks without intent, distributions, why dumps are missing, the tree/toolbar/list/table share against 30%.",
			Summary:     "The training-dataset capture: counters, AT-SPI/OCR coverage, clicks without intent, distributions and the hard-screen share against 30 % (JSON)",
			Effect:      readOnly("reads the capture's index and counters")}, datasetStatus),
	}
}

func datasetStatus(ctx context.Context, c *Call, _ *datasetStatusArgs) (*mcp.CallToolResult, error) {
	d := c.Server.app.Env.Dataset
	var st any = map[string]any{"enabled": false,
		"hint": "set POLIGON_MCP_DATASET (or [dataset] dir in the config) to a directory to capture"}
	if d != nil {
		s, err := dataset.StatusOf(d.Writer.Dir(), d.Writer.Counters.Snapshot(), int64(c.Server.cfg.Dataset.MinFreeMB))
		if err != nil {
			return nil, err
		}
		st = s
	}
	out, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	return text("%s", out), nil
}

// datasetCollector publishes dataset.counters, read at scrape time.
type datasetCollector struct{ s *Server }

var datasetCounters = prometheus.NewDesc("poligon_dataset_counters_total",
	"Training-dataset capture in this process (dataset.counters): shots, atspi, atspi_missing, ocr, ocr_missing, clicks, clicks_without_intent, hard_screens, screen_changed, no_session, rescaled, failed, no_space.",
	[]string{"counter"}, nil)

func (c datasetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- datasetCounters }

func (c datasetCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.s.app.Env.Dataset
	if d == nil {
		return
	}
	v := d.Writer.Counters.Snapshot()
	for _, n := range []struct {
		name  string
		value int64
	}{
		{"shots", v.Shots}, {"atspi", v.ATSPI}, {"atspi_missing", v.ATSPIMissing}, {"ocr", v.OCR}, {"ocr_missing", v.OCRMissing},
		{"clicks", v.Clicks}, {"clicks_without_intent", v.ClicksWithoutIntent}, {"hard_screens", v.HardScreens},
		{"screen_changed", v.ScreenChanged}, {"no_session", v.NoSession}, {"rescaled", v.Rescaled}, {"failed", v.Failed}, {"no_space", v.NoSpace},
	} {
		ch <- prometheus.MustNewConstMetric(datasetCounters, prometheus.CounterValue, float64(n.value), n.name)
	}
}
