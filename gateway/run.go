package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/gradiopool/gradiopool/internal/logattr"
)

// defaultKeepAliveTimeout closes keep-alive connections idle this long.
const defaultKeepAliveTimeout = 2 * time.Minute

// drainFlushTimeout bounds the wait for the answers of calls cancelled at
// the end of a drain to be sent.
const drainFlushTimeout = 5 * time.Second

// frontDoorPoll is how often a drain looks at the front door's calls in
// flight (they are counted in their sessions, not in a WaitGroup).
const frontDoorPoll = 20 * time.Millisecond

// callsInFlight counts /v1 and REST calls and the front door's.
func (g *Gateway) callsInFlight() int64 {
	n := g.inFlight.Load()
	if g.front != nil {
		n += int64(g.front.CallsInFlight())
	}
	return n
}

// Serve answers HTTP on ln until ctx ends, then drains: readyz turns 503 and
// new calls get 503 "draining" (the listener stays open while calls are in
// flight, so that probes and callers get those answers), calls in flight
// may finish for up to cfg.DrainTimeout, the rest are cancelled (each is
// cancelled at its app, its session returned, its caller answered 503
// "draining") and Serve returns nil once all handlers ended.
// An error is returned only when serving failed.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	baseCtx, cancelBase := context.WithCancelCause(context.Background())
	defer cancelBase(nil)
	ln, connState := g.guard(ln)
	srv := &http.Server{
		Handler:   g,
		ConnState: connState,
		// No WriteTimeout or ReadTimeout: they would cut a 10-minute call or
		// stream. Time-outs belong to phases: headers here, the queue and the
		// caller's own deadline in the pool.
		ReadHeaderTimeout: g.headerTimeout,
		IdleTimeout:       g.keepAliveTimeout,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	histCtx, stopHist := context.WithCancel(context.Background())
	histDone := make(chan struct{})
	go func() { defer close(histDone); g.history.Run(histCtx) }()
	defer func() { stopHist(); <-histDone }()
	g.log.Info("gateway listening", slog.String("addr", ln.Addr().String()))

	select {
	case err := <-errc:
		g.cancelJobs(nil)
		return err
	case <-ctx.Done():
	}
	g.draining.Store(true)
	if g.front != nil {
		g.front.Drain() // heartbeat streams end, so that Shutdown need not wait for them
	}
	g.log.Info("draining", slog.Int64("in_flight", g.callsInFlight()), logattr.Ms("drain_timeout", g.cfg.DrainTimeout))
	dctx, cancel := context.WithTimeout(context.Background(), g.cfg.DrainTimeout)
	defer cancel()
	jobsDone := make(chan struct{})
	go func() { g.jobs.Wait(); close(jobsDone) }()
	// Front-door calls are waited for like /v1 calls: they run on the
	// callers' own queue/data streams, which hold no job.
	allDone := make(chan struct{})
	go func() {
		<-jobsDone
		for g.front != nil && g.front.CallsInFlight() > 0 {
			select {
			case <-dctx.Done():
				return
			case <-time.After(frontDoorPoll):
			}
		}
		close(allDone)
	}()

	// While calls are in flight the listener stays open, so that probes
	// see /readyz answer 503 and new calls get a JSON 503 "draining"
	// instead of a refused connection; answers close their connection
	// (ServeHTTP). Idle kept-alive connections are not closed now: a
	// caller may be sending on one this instant (it would get a reset or
	// an EOF); it gets its answer and the close with it. Shutdown closes
	// the ones left idle at the end.
	select {
	case <-allDone:
	case <-dctx.Done():
	}
	var shutErr error
	if dctx.Err() == nil {
		// Shutdown closes the listener and idle connections and waits for
		// the active ones (streams of finished REST calls, say).
		shutErr = srv.Shutdown(dctx)
	}
	if dctx.Err() != nil {
		left := g.callsInFlight()
		g.log.Warn("drain timeout: cancelling calls still in flight", slog.Int64("in_flight", left))
		if g.front != nil {
			// Before the requests' contexts end: each front-door stream
			// first tells its caller that the call was stopped
			// (process_completed, success false), then closes.
			g.front.StopCalls()
			fctx, fcancel := context.WithTimeout(context.Background(), drainFlushTimeout)
			for g.front.CallsInFlight() > 0 && fctx.Err() == nil {
				select {
				case <-fctx.Done():
				case <-time.After(frontDoorPoll):
				}
			}
			fcancel()
		}
		cancelBase(errDrainTimeout)
		g.cancelJobs(errDrainTimeout)
		// Cancelled calls end promptly (cancel at the app, session back).
		select {
		case <-jobsDone:
		case <-time.After(10 * time.Second):
			g.log.Error("calls did not end after cancel", slog.Int64("in_flight", g.inFlight.Load()))
		}
		// The cancelled calls answer "503 draining": let those answers
		// go out before the connections close.
		fctx, fcancel := context.WithTimeout(context.Background(), drainFlushTimeout)
		_ = srv.Shutdown(fctx)
		fcancel()
		_ = srv.Close()
		shutErr = nil
	}
	g.cancelJobs(errDrainTimeout)
	if shutErr != nil && !errors.Is(shutErr, context.DeadlineExceeded) {
		return shutErr
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	g.log.Info("drained")
	return nil
}

// NewLogger returns the slog logger for cfg.Log writing to w: JSON, or
// text when Format is "auto" and w is a terminal.
func NewLogger(cfg LogConfig, w io.Writer) (*slog.Logger, error) {
	if cfg.Level == "" {
		cfg.Level = "info"
	}
	level, err := parseLevel(cfg.Level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	format := cfg.Format
	if format == "" || format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}
