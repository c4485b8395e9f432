package fdtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// HoldApp has one endpoint, "hold", that runs until release is closed (or
// its call is cancelled), up to 10 at once: calls a test keeps running
// (a drain, a cancel, a slot held) for as long as it needs.
func HoldApp(release <-chan struct{}) *gradiotest.App {
	app := gradiotest.NewApp()
	ep := app.Handle("hold", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		select {
		case <-release:
			return []any{"released"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	ep.ConcurrencyLimit = 10
	return app
}

// SpreadApp is the default app plus "hold": stateless, one call at a time
// per replica (Gradio's default), running until gate closes, so that
// where the front door sends a session's calls shows; and "measured".
func SpreadApp(gate chan struct{}) *gradiotest.App {
	app := gradiotest.DefaultApp()
	app.Handle("hold", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		s, _ := c.String(0)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []any{"held " + s}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	// measured: upper that takes 20 ms, so that the slot time a call
	// measures, and the queue's ETA from it, is not below the
	// millisecond the front door rounds rank_eta to.
	app.Handle("measured", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		s, _ := c.String(0)
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []any{strings.ToUpper(s)}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	return app
}

// BridgedMode reports whether the front door bridges mode's replicas.
// Before Gradio 4.21 /info publishes no Python parameter names: the front
// door names the parameters after their labels (appshape.PresentInfo),
// which the reference app's Python names differ from in two endpoints, so
// view_api is not required of them.
func BridgedMode(m gradiotest.Mode) bool {
	return m.Protocol() != "sse_v3"
}

// StarvedRecorder records the pool's suspect and ejected events (a
// replica short of threads must be neither), and counts them all: a
// recorder that saw none was not hooked, and proves nothing. Its OnEvent
// goes in pool.Config.OnEvent.
type StarvedRecorder struct {
	mu      sync.Mutex
	events  int
	suspect []string
}

// OnEvent records e.
func (r *StarvedRecorder) OnEvent(e pool.Event) {
	r.mu.Lock()
	r.events++
	r.mu.Unlock()
	if e.Kind == pool.EventSuspect || e.Kind == pool.EventEjected {
		r.mu.Lock()
		r.suspect = append(r.suspect, fmt.Sprintf("%s %s: %v", e.Kind, e.Replica, e.Err))
		r.mu.Unlock()
	}
}

// Events is how many events the recorder saw.
func (r *StarvedRecorder) Events() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events
}

// Suspect is the suspect and ejected events seen so far, one line each.
func (r *StarvedRecorder) Suspect() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.suspect...)
}

// Replicas starts one simulated replica per app (nil: the default app),
// each closed when the test ends, and returns them with their URLs in
// that order. Their 5 ms between streamed messages keeps a call in
// flight long enough for a test to see it, yet the suite fast. setup
// (nil: none) changes replica i before it starts (its Gradio generation,
// its numbering...).
func Replicas(t testing.TB, apps []*gradiotest.App, setup func(i int, s *gradiotest.Server)) (sims []*gradiotest.Server, urls []string) {
	t.Helper()
	for i, app := range apps {
		s := gradiotest.NewUnstartedServer(app)
		s.StepDelay = 5 * time.Millisecond
		if setup != nil {
			setup(i, s)
		}
		s.Start()
		t.Cleanup(s.Close)
		sims = append(sims, s)
		urls = append(urls, s.URL)
	}
	return sims, urls
}

// JSONLogs is a logger writing JSON at info level into the returned
// buffer, for tests that check what the pool and the front door log (a
// replica reported, a call's outcome) while they run.
func JSONLogs() (*logbuf.Buffer, *slog.Logger) {
	logs := &logbuf.Buffer{}
	return logs, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
