package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/pool"
)

// realGateway is the gateway over a real pool of n simulated replicas.
func realGateway(t *testing.T, n int, mod func(*gateway.Config)) (*httptest.Server, []*gradiotest.Server, *pool.Pool) {
	t.Helper()
	var sims []*gradiotest.Server
	var urls []string
	for range n {
		s := gradiotest.NewUnstartedServer(nil)
		s.DefaultConcurrencyLimit = -1
		s.Start()
		t.Cleanup(s.Close)
		sims = append(sims, s)
		urls = append(urls, s.URL)
	}
	cfg := gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 1, MaxConnections: 4}}
	if mod != nil {
		mod(&cfg)
	}
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(nil, metrics))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	srv := httptest.NewServer(gateway.New(cfg, b, nil, metrics))
	t.Cleanup(srv.Close)
	return srv, sims, p
}

func TestRealPoolEndpoints(t *testing.T) {
	srv, _, _ := realGateway(t, 2, nil)
	for _, tc := range []struct {
		name, path, body string
		status           int
		contains         string
	}{
		{"predict", "/v1/predict/upper", `{"data":["hello"]}`, 200, `"data":["HELLO"]`},
		{"wrong arity", "/v1/predict/upper", `{"data":["a","b","c"]}`, 400, `"code":"bad_arguments"`},
		{"unknown endpoint", "/v1/predict/nope", `{"data":[]}`, 404, `"code":"unknown_endpoint"`},
		{"app error", "/v1/predict/fail", `{"data":["x"]}`, 422, `deliberate failure for input 'x'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", srv.URL+tc.path, tc.body, gateway.UserHeader, "Alice@Example.com")
			if a.status != tc.status || !strings.Contains(a.body, tc.contains) {
				t.Fatalf("%d %s", a.status, a.body)
			}
		})
	}
	t.Run("submit generator", func(t *testing.T) {
		resp, err := http.Post(srv.URL+"/v1/submit/count", "application/json", strings.NewReader(`{"data":[3]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		names, data, _ := sseRecords(t, resp.Body)
		joined := strings.Join(names, " ")
		if !strings.HasPrefix(joined, "accepted") || !strings.HasSuffix(joined, "output output output complete") {
			t.Fatalf("%q %q", joined, data)
		}
		if !strings.Contains(data[len(data)-1], `"0 1 2"`) {
			t.Fatal(data)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		a := do(t, "GET", srv.URL+"/metrics", "")
		for _, want := range []string{
			`gradiopool_sessions_created_total{replica="127.0.0.1:`,
			`gradiopool_session_create_seconds_count{replica="127.0.0.1:`,
			`gradiopool_sessions{replica="127.0.0.1:`,
			`gradiopool_sessions_max{replica="127.0.0.1:`,
			`gradiopool_waiting_callers{replica="127.0.0.1:`,
			`gradiopool_queue_timeouts_total{replica="127.0.0.1:`,
			`gradiopool_session_use_seconds_count{replica="127.0.0.1:`,
			`gradiopool_session_wait_seconds_count{replica="127.0.0.1:`,
			`gradiopool_app_errors_total{endpoint="fail",replica="127.0.0.1:`,
			`gradiopool_calls_total{replica="127.0.0.1:`,
			`gradiopool_replica_state{replica="127.0.0.1:`,
			`gradiopool_replica_up{replica="127.0.0.1:`,
			`gradiopool_ready 1`,
		} {
			if !strings.Contains(a.body, want) {
				t.Errorf("no %s", want)
			}
		}
		if strings.Contains(strings.ToLower(a.body), "alice") {
			t.Fatal("metrics contain the e-mail")
		}
	})
	t.Run("stats", func(t *testing.T) {
		a := do(t, "GET", srv.URL+"/api/admin/pool-stats", "")
		var st map[string]any
		if err := json.Unmarshal([]byte(a.body), &st); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"pools", "totalConnections", "availableConnections", "inUseConnections", "totalQueued", "userAssignments", "initialized", "healthCheckRunning", "lastHealthCheck"} {
			if _, ok := st[k]; !ok {
				t.Errorf("pool-stats has no %q: %s", k, a.body)
			}
		}
		if strings.Contains(strings.ToLower(a.body), "alice") {
			t.Fatal("stats contain the e-mail")
		}
	})
}

// TestRealPoolDisconnect cuts a caller during a slow call: the app's job
// must be cancelled and the session must be idle again.
func TestRealPoolDisconnect(t *testing.T) {
	for _, path := range []string{"/v1/predict/slow", "/v1/submit/slow"} {
		t.Run(path, func(t *testing.T) {
			srv, sims, p := realGateway(t, 1, nil)
			sim := sims[0]
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(`{"data":[60]}`))
			done := make(chan struct{})
			var body []byte
			go func() {
				defer close(done)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
			}()
			defer func() {
				if t.Failed() {
					cancel()
					<-done
					t.Logf("answer: %s", body)
				}
			}()
			fdtest.WaitFor(t, "the slow call to start", func() bool { return sim.Executions("slow") == 1 })
			fdtest.WaitFor(t, "the session to be in use", func() bool { return p.Stats(t.Context()).InUseConnections == 1 })
			cancel()
			<-done
			fdtest.WaitFor(t, "the session to be idle again", func() bool {
				st := p.Stats(t.Context())
				return st.InUseConnections == 0 && st.AvailableConnections >= 1
			})
			fdtest.WaitFor(t, "the app's job to end", func() bool { return sim.Snapshot().Running == 0 })
		})
	}
}

func TestRealPoolFailures(t *testing.T) {
	t.Run("every replica failed", func(t *testing.T) {
		srv, sims, _ := realGateway(t, 2, nil)
		for _, s := range sims {
			s.FailNextJoins(100)
		}
		a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["a"]}`)
		if a.status != 502 || errorCode(t, a.body) != "all_replicas_failed" {
			t.Fatal(a.status, a.body)
		}
		for _, s := range sims {
			name := strings.TrimPrefix(s.URL, "http://")
			if !strings.Contains(a.body, name) {
				t.Errorf("the message does not name %s: %s", name, a.body)
			}
		}
	})
	t.Run("queue timeout", func(t *testing.T) {
		srv, sims, p := realGateway(t, 1, func(c *gateway.Config) {
			c.Pool.MaxConnections, c.Pool.MinConnections, c.Pool.QueueTimeout = 1, 1, 50*time.Millisecond
		})
		// The queue time-out covers the app's connect too: connect first.
		p.Warm()
		fdtest.WaitFor(t, "the replica to connect", func() bool { return p.Stats(t.Context()).AvailableConnections == 1 })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/predict/slow", strings.NewReader(`{"data":[60]}`))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		fdtest.WaitFor(t, "the slow call to hold the only session", func() bool {
			return sims[0].Executions("slow") == 1 && p.Stats(t.Context()).InUseConnections == 1
		})
		a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["a"]}`)
		if a.status != 503 || a.header.Get("Retry-After") == "" {
			t.Fatal(a.status, a.body)
		}
		if c := errorCode(t, a.body); c != "queue_timeout" && c != "queue_full" {
			t.Fatal(c, a.body)
		}
		cancel()
		<-done
	})
}

// TestRealPoolNoLeakUnderChurn mixes successes, app errors, generator
// streams and callers that leave early: afterwards no session is in use
// and nobody waits.
func TestRealPoolNoLeakUnderChurn(t *testing.T) {
	srv, sims, p := realGateway(t, 2, func(c *gateway.Config) {
		c.Pool.MaxConnections, c.Pool.MinConnections = 3, 1
	})
	for _, s := range sims {
		s.UpdateKnobs(func(k *gradiotest.Knobs) { k.Latency = 5 * time.Millisecond; k.StepDelay = 5 * time.Millisecond })
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{} // kind/status: what each kind of call got
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			kind, path, body := "upper", "/v1/predict/upper", `{"data":["x"]}`
			switch i % 4 {
			case 1:
				kind, path, body = "fail", "/v1/predict/fail", `{"data":["x"]}`
			case 2:
				kind, path, body = "count", "/v1/submit/count", `{"data":[4]}`
			case 3:
				kind, path, body = "slow", "/v1/submit/slow", `{"data":[30]}`
				time.AfterFunc(time.Duration(i)*time.Millisecond, cancel)
			}
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(body))
			req.Header.Set(gateway.UserHeader, "user"+strconv.Itoa(i%7)+"@example.com")
			outcome := "transport error"
			if resp, err := http.DefaultClient.Do(req); err == nil {
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				outcome = strconv.Itoa(resp.StatusCode)
				switch {
				case rerr != nil:
					outcome += " cut"
				case strings.Contains(string(b), "event: complete"):
					outcome += " complete"
				}
			}
			mu.Lock()
			outcomes[kind+" "+outcome]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	fdtest.WaitFor(t, "every session to be back", func() bool {
		st := p.Stats(t.Context())
		return st.InUseConnections == 0 && st.TotalQueued == 0
	})
	fdtest.WaitFor(t, "the apps to run nothing", func() bool { return sims[0].Snapshot().Running+sims[1].Snapshot().Running == 0 })
	// The churn was real: every kind of call got its own ending.
	t.Logf("outcomes: %v", outcomes)
	for _, want := range []string{"upper 200", "fail 422", "count 200 complete"} {
		if outcomes[want] == 0 {
			t.Errorf("no %q among %v", want, outcomes)
		}
	}
	// A caller of the 30 s call leaves before the answer (transport error)
	// or mid-stream (200, body cut); it never sees it complete.
	if left := outcomes["slow transport error"] + outcomes["slow 200 cut"]; left != 10 {
		t.Errorf("want all 10 callers of the 30 s call to have left early: %v", outcomes)
	}
	if n := sims[0].Executions("upper") + sims[1].Executions("upper"); n != 10 {
		t.Errorf("upper ran %d times, want 10", n)
	}
}
