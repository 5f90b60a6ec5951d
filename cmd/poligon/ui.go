package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/poligon/poligon/web"
)

// defaultUIBind is where poligon ui listens: loopback only.
const defaultUIBind = "127.0.0.1:8812"

// ui serves the browser views on loopback for a user of the local backend
// who has no bearer token (an MCP client over stdio): it prints a one-time
// login link on the terminal, whose token rides in the link's fragment (a
// browser never sends it in a request line, so no log holds it).
func ui(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	bind := fs.String("bind", defaultUIBind, "loopback address to serve the views on")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	host, _, err := net.SplitHostPort(*bind)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		fmt.Fprintf(stderr, "error: --bind %s is not a loopback address\nhint: poligon ui serves this machine's user only (127.0.0.1:PORT); poligon serve serves /ui/ to others, with tokens\n", *bind)
		return exitError(2)
	}
	cfg, err := cf.load(stderr)
	if err != nil {
		return err
	}
	log, closeLogs, err := openLogs(cfg, stderr)
	if err != nil {
		return err
	}
	defer closeLogs()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := openApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := net.Listen("tcp", *bind)
	if err != nil {
		return err
	}
	token := web.NewLoginToken()
	hs := &http.Server{Handler: web.New(a, web.Options{LoginToken: token}).Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	base := "http://" + ln.Addr().String() + "/ui/login"
	fmt.Fprintf(stdout, "poligon ui: the views of %s's VMs, stands and benches on this machine.\n", a.Local().Owner)
	fmt.Fprintf(stdout, "Open this link (it logs in once):\n\n    %s#token=%s\n\nor open %s and paste the token: %s\n", base, token, base, token)
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	return nil
}
