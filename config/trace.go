package config

import (
	"fmt"
	"time"
)

// Trace bounds the trace: every call on a machine, kept under state_dir
// (steps in the store, frames as PNG files), oldest dropped first.
type Trace struct {
	MaxMB    int      `toml:"max_mb"`   // steps and frames together; default 1024
	MaxAge   Duration `toml:"max_age"`  // default 336h (14 days)
	Disabled bool     `toml:"disabled"` // record nothing
}

// traceDefaults fills the trace's bounds.
func (c *Config) traceDefaults() {
	if c.Trace.MaxMB == 0 {
		c.Trace.MaxMB = 1024
	}
	if c.Trace.MaxAge.Duration == 0 {
		c.Trace.MaxAge.Duration = 14 * 24 * time.Hour
	}
}

// checkTrace checks the trace's bounds.
func (c *Config) checkTrace() []error {
	var problems []error
	if c.Trace.MaxMB < 16 {
		problems = append(problems, fmt.Errorf("trace.max_mb %d: at least 16", c.Trace.MaxMB))
	}
	if c.Trace.MaxAge.Duration < time.Minute {
		problems = append(problems, fmt.Errorf("trace.max_age %s: at least 1m", c.Trace.MaxAge.Duration))
	}
	return problems
}
