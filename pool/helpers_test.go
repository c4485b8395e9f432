package pool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// replicas starts n simulated replicas with unlimited app concurrency.
func replicas(t *testing.T, n int) []*gradiotest.Server {
	t.Helper()
	srvs := make([]*gradiotest.Server, n)
	for i := range srvs {
		s := gradiotest.NewUnstartedServer(nil)
		s.DefaultConcurrencyLimit = -1
		s.Start()
		t.Cleanup(s.Close)
		srvs[i] = s
	}
	return srvs
}

// unlimitedReplicas starts n replicas serving app with no concurrency
// limit per endpoint, so that load tests measure the pool, not the app.
func unlimitedReplicas(t *testing.T, app *gradiotest.App, n int) []*gradiotest.Server {
	t.Helper()
	srvs := make([]*gradiotest.Server, n)
	for i := range srvs {
		s := gradiotest.NewUnstartedServer(app)
		s.DefaultConcurrencyLimit = -1
		s.Start()
		t.Cleanup(s.Close)
		srvs[i] = s
	}
	return srvs
}

func urls(srvs []*gradiotest.Server) []string {
	out := make([]string, len(srvs))
	for i, s := range srvs {
		out[i] = s.URL
	}
	return out
}

// newPool creates a pool over srvs with small sizes and short delays, closed
// at cleanup.
func newPool(t *testing.T, cfg pool.Config) *pool.Pool {
	t.Helper()
	if cfg.MinConnections == 0 {
		cfg.MinConnections = 1
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 5
	}
	cfg.ClientOptions = append([]gradio.Option{gradio.WithHeaderTimeout(2 * time.Second)}, cfg.ClientOptions...)
	p, err := pool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool.SetDelays(p, time.Millisecond, 50*time.Millisecond, 200*time.Millisecond)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// executions sums the executions of api over srvs, and lists them.
func executions(srvs []*gradiotest.Server, api string) (total int, each []int) {
	for _, s := range srvs {
		n := s.Executions(api)
		each = append(each, n)
		total += n
	}
	return total, each
}

func str(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("output %s is not a string: %v", raw, err)
	}
	return s
}

func user(i int) string { return fmt.Sprintf("User%d@Example.com", i) }

// recorder collects pool events.
type recorder struct {
	mu     sync.Mutex
	events []pool.Event
}

func (r *recorder) hook(e pool.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// count returns how many events of kind k concern replica ("" = any).
func (r *recorder) count(k pool.EventKind, replica string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == k && (replica == "" || e.Replica == replica) {
			n++
		}
	}
	return n
}

// deadURL returns a loopback URL where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

// blackholeURL returns a loopback URL that accepts TCP connections (the
// kernel's backlog) but never answers: every connect times out.
func blackholeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return "http://" + l.Addr().String()
}

// echoApp is an app whose "echo" endpoint counts executions per input, to
// prove that no logical call runs twice.
type echoApp struct {
	mu   sync.Mutex
	runs map[string]int
}

func newEchoApp() (*echoApp, *gradiotest.App) {
	e := &echoApp{runs: map[string]int{}}
	a := gradiotest.NewApp()
	a.Handle("echo", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		s, err := c.String(0)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		e.runs[s]++
		e.mu.Unlock()
		if err := c.Sleep(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
		return []any{s}, nil
	}, nil, nil)
	return e, a
}

func (e *echoApp) runsOf(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[s]
}

// waitUntil polls cond every 10 ms, for at most 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not reached within 10 s")
}
