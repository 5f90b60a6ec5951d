package engine

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus series, on a registry of its own (a
// test can run several servers in one process).
type metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "poligon_tool_calls_total",
			Help: "Tool calls by tool and outcome (ok, error: refused or failed for the model, failed: the server failed).",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "poligon_tool_call_duration_seconds",
			Help:    "Tool call durations.",
			Buckets: []float64{.005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"tool"}),
	}
	m.reg.MustRegister(m.calls, m.duration, eyesCollector{s}, datasetCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "poligon_console_connections", Help: "Open VNC console connections."},
			func() float64 { return float64(s.app.Consoles()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "poligon_tools", Help: "Registered tools, scripts included."},
			func() float64 { return float64(len(s.ToolNames())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "poligon_uptime_seconds", Help: "Seconds since start."},
			func() float64 { return time.Since(s.started).Seconds() }),
		traceCollector{s},
	)
	return m
}

func (m *metrics) observe(tool, outcome string, d time.Duration) {
	m.calls.WithLabelValues(tool, outcome).Inc()
	m.duration.WithLabelValues(tool).Observe(d.Seconds())
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// traceCollector publishes the trace's counters and size, read at scrape
// time.
type traceCollector struct{ s *Server }

var (
	traceSteps   = prometheus.NewDesc("poligon_trace_steps_total", "Trace steps stored by this process.", nil, nil)
	traceDropped = prometheus.NewDesc("poligon_trace_dropped_total", "Trace steps dropped: the writer's queue was full, or the store refused them.", nil, nil)
	tracePruned  = prometheus.NewDesc("poligon_trace_pruned_total", "Trace steps dropped by the bound ([trace] max_mb, max_age), oldest first.", nil, nil)
	traceBytes   = prometheus.NewDesc("poligon_trace_bytes", "What the trace holds: its steps and its frames.", []string{"part"}, nil)
)

func (c traceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{traceSteps, traceDropped, tracePruned, traceBytes} {
		ch <- d
	}
}

func (c traceCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.s.app.Trace
	if r == nil {
		return
	}
	st := r.Stats()
	ch <- prometheus.MustNewConstMetric(traceSteps, prometheus.CounterValue, float64(st.Recorded))
	ch <- prometheus.MustNewConstMetric(traceDropped, prometheus.CounterValue, float64(st.Dropped))
	ch <- prometheus.MustNewConstMetric(tracePruned, prometheus.CounterValue, float64(st.Pruned))
	if u, err := r.Usage(context.Background()); err == nil {
		ch <- prometheus.MustNewConstMetric(traceBytes, prometheus.GaugeValue, float64(u.StepBytes), "steps")
		ch <- prometheus.MustNewConstMetric(traceBytes, prometheus.GaugeValue, float64(u.FrameBytes), "frames")
	}
}
