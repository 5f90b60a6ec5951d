package engine

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poligon/poligon/backends/vision"
)

// What /metrics says of the eyes (app.EyesReport is what /readyz says).

// eyesCollector publishes the model and OCR counters, read at scrape time.
type eyesCollector struct{ s *Server }

var (
	modelCalls      = prometheus.NewDesc("poligon_model_calls_total", "Model calls by path (vision, grounding).", []string{"path"}, nil)
	modelFailed     = prometheus.NewDesc("poligon_model_failed_total", "Model calls with no usable answer: transport error, non-2xx, not a completion.", []string{"path"}, nil)
	modelIncomplete = prometheus.NewDesc("poligon_model_incomplete_total", "Model answers cut at the token cap or unparseable.", []string{"path"}, nil)
	modelNoUsage    = prometheus.NewDesc("poligon_model_usage_missing_total", "Model answers without token counts.", []string{"path"}, nil)
	modelTokens     = prometheus.NewDesc("poligon_model_tokens_total", "Tokens the model endpoints reported, by kind (prompt, completion).", []string{"path", "kind"}, nil)
	modelSeconds    = prometheus.NewDesc("poligon_model_seconds_total", "Time spent in model calls.", []string{"path"}, nil)
	modelEvents     = prometheus.NewDesc("poligon_model_events_total", "Model failures recorded in model-events.jsonl (POLIGON_MCP_EVENTS).", nil, nil)
	visionHits      = prometheus.NewDesc("poligon_vision_cache_hits_total", "Element lists served from the frame cache.", nil, nil)
	visionEntries   = prometheus.NewDesc("poligon_vision_cache_entries", "Frames in the element cache (at most 512).", nil, nil)
	ocrReads        = prometheus.NewDesc("poligon_ocr_reads_total", "Frames read by OCR.", nil, nil)
	ocrSeconds      = prometheus.NewDesc("poligon_ocr_seconds_total", "Time spent reading frames by OCR.", nil, nil)
	ocrLines        = prometheus.NewDesc("poligon_ocr_lines_total", "Text pieces, by source (read: recognised, cached: remembered).", []string{"source"}, nil)
)

func (c eyesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{modelCalls, modelFailed, modelIncomplete, modelNoUsage, modelTokens, modelSeconds, modelEvents, visionHits, visionEntries, ocrReads, ocrSeconds, ocrLines} {
		ch <- d
	}
}

func (c eyesCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.s.app.Eyes
	if e == nil {
		return
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	for _, m := range []*vision.Client{e.Vision, e.Grounding} {
		if m == nil {
			continue
		}
		st, path := m.Stats(), m.Purpose()
		counter(modelCalls, float64(st.Calls), path)
		counter(modelFailed, float64(st.Failed), path)
		counter(modelIncomplete, float64(st.Incomplete), path)
		counter(modelNoUsage, float64(st.UsageMissing), path)
		counter(modelTokens, float64(st.PromptTokens), path, "prompt")
		counter(modelTokens, float64(st.CompletionTokens), path, "completion")
		counter(modelSeconds, st.Total.Seconds(), path)
	}
	if e.Events != nil {
		counter(modelEvents, float64(e.Events.Recorded()))
	}
	if e.Vision != nil {
		hits, entries := c.s.app.Env.Eyes.CacheStats()
		counter(visionHits, float64(hits))
		ch <- prometheus.MustNewConstMetric(visionEntries, prometheus.GaugeValue, float64(entries))
	}
	if e.OCR != nil {
		st := e.OCR.Stats()
		counter(ocrReads, float64(st.Reads))
		counter(ocrSeconds, st.Total.Seconds())
		counter(ocrLines, float64(st.LinesRead), "read")
		counter(ocrLines, float64(st.LinesCached), "cached")
	}
}
