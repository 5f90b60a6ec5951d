package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/logs"
)

// newLogger is a terminal command's logger (warnings of `poligon run`,
// `stand`, `bench`): slog's text at level, with req like every line.
func newLogger(w io.Writer, level string) *slog.Logger {
	log, err := logs.New(w, "text", level)
	if err != nil {
		return slog.New(logs.WithReqs(slog.NewTextHandler(w, nil)))
	}
	return log
}

// openLogs makes the server's logger: log_format at log_level (the config
// checked both), and the console dump when POLIGON_MCP_DUMP names a file.
// close ends the dump.
func openLogs(cfg *config.Config, w io.Writer) (*slog.Logger, func(), error) {
	log, err := logs.New(w, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Dump == "" {
		return log, func() {}, nil
	}
	f, err := os.OpenFile(cfg.Dump, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("POLIGON_MCP_DUMP: %w", err)
	}
	app.SetConsoleDump(f)
	log.Info("recording the raw RFB bytes of every console", "dump", cfg.Dump)
	return log, func() { app.SetConsoleDump(nil); f.Close() }, nil
}
