package gateway_test

// The pool and the gateway on three REAL Gradio servers as replicas (any
// mix of releases serving the reference app, testdata/realgradio/app.py).
// Skipped unless GRADIOPOOL_REAL_REPLICAS names them; `make test-real`
// sets it. Subtest names are the feature names of docs/COMPATIBILITY.md.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/pool"
)

const envRealReplicas = "GRADIOPOOL_REAL_REPLICAS"

func TestRealPoolGateway(t *testing.T) {
	v := os.Getenv(envRealReplicas)
	if v == "" {
		t.Skip(envRealReplicas + " is not set (comma-separated URLs of real Gradio apps; see docs/COMPATIBILITY.md)")
	}
	urls := strings.Split(v, ",")
	cfg := gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 2, MaxConnections: 16}}
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(nil, metrics))
	if err != nil {
		t.Fatal(err)
	}
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, nil, metrics)
	srv := httptest.NewServer(g)
	defer func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
		_ = p.Close(context.Background())
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	post := func(t *testing.T, path, body string, hdr ...string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		rb, _ := io.ReadAll(res.Body)
		return res.StatusCode, rb
	}
	type predictOut struct {
		Data    []json.RawMessage `json:"data"`
		Replica string            `json:"replica"`
	}

	t.Run("gateway_predict", func(t *testing.T) {
		code, rb := post(t, "/v1/predict/upper", `{"data":["hello gateway"]}`)
		var out predictOut
		if code != 200 || json.Unmarshal(rb, &out) != nil || len(out.Data) != 1 || string(out.Data[0]) != `"HELLO GATEWAY"` {
			t.Fatalf("%d %s", code, rb)
		}
	})
	t.Run("gateway_stream", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/submit/count", strings.NewReader(`{"data":[3]}`))
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var kinds, outs []string
		sc := bufio.NewScanner(res.Body)
		ev := ""
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				ev = e
				kinds = append(kinds, e)
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok && (ev == "output" || ev == "complete") {
				var v struct {
					Data []string `json:"data"`
				}
				_ = json.Unmarshal([]byte(d), &v)
				if len(v.Data) == 1 {
					outs = append(outs, v.Data[0])
				}
			}
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != "complete" || len(outs) == 0 || outs[len(outs)-1] != "0 1 2" {
			t.Fatalf("events %v outputs %q", kinds, outs)
		}
	})
	t.Run("gateway_gr_error", func(t *testing.T) {
		code, rb := post(t, "/v1/predict/fail", `{"data":["boom"]}`)
		if code != 422 || !strings.Contains(string(rb), "deliberate failure for input 'boom'") || strings.Contains(string(rb), `\"deliberate`) {
			t.Fatalf("%d %s, want 422 app_error with the unquoted message", code, rb)
		}
	})
	t.Run("gateway_rest_call", func(t *testing.T) {
		code, rb := post(t, "/gradio_api/call/upper", `{"data":["rest"]}`)
		var id struct {
			EventID string `json:"event_id"`
		}
		if code != 200 || json.Unmarshal(rb, &id) != nil || id.EventID == "" {
			t.Fatalf("%d %s", code, rb)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/gradio_api/call/upper/"+id.EventID, nil)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(body), "event: complete") || !strings.Contains(string(body), `"REST"`) {
			t.Fatalf("stream %s", body)
		}
	})
	t.Run("pool_parallel_slow", func(t *testing.T) {
		// 20 parallel 0.5 s calls over three replicas. Each real replica
		// runs slow one call at a time (concurrency_limit=1), so the pool
		// spreads the calls but the waiting happens inside the Spaces.
		const n = 20
		start := time.Now()
		var mu sync.Mutex
		perReplica := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, rb := post(t, "/v1/predict/slow", `{"data":[0.5]}`, gateway.UserHeader, fmt.Sprintf("user%d@example.com", i))
				var out predictOut
				if code != 200 || json.Unmarshal(rb, &out) != nil {
					errs <- fmt.Errorf("%d %s", code, rb)
					return
				}
				mu.Lock()
				perReplica[out.Replica]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		t.Logf("%d parallel slow(0.5) calls in %v, per replica %v", n, time.Since(start).Round(10*time.Millisecond), perReplica)
		if len(perReplica) != len(urls) {
			t.Errorf("calls went to %d replicas, want all %d: %v", len(perReplica), len(urls), perReplica)
		}
	})
	t.Run("pool_stats", func(t *testing.T) {
		st := p.Stats(ctx)
		b, _ := json.Marshal(st)
		if !strings.Contains(string(b), `"initialized":true`) {
			t.Errorf("stats %s", b)
		}
		t.Logf("pool-stats %s", b)
	})
}
