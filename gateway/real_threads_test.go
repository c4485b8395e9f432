package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/pool"
)

const envRealThreads = "GRADIOPOOL_REAL_THREADS"

// Real Gradio short of threads (issue 36 item 5): 50 parallel 60 s calls
// on a Space whose endpoint has no concurrency limit, with Gradio's
// default 40 worker threads (testdata/realgradio/threads_app.py on
// 5.49.1). 40 calls run, the other 10 wait for a thread, and so do the
// synchronous routes the gateway needs meanwhile (/app_id, its ping, and
// queue/join's login check): they are answered late, up to 60 s. Straight
// at the replica all 50 calls complete. TestThreadStarvedReplicaNotDead
// (pool) is the same on the simulator with MaxThreads 40.
const (
	starvedCalls   = 50
	starvedSeconds = 60
)

// TestRealThreadStarved: through the pool (/v1 calls) and through the
// front door (sse_v3 joins relayed to the replica), at the default
// settings (only max_connections raised to 60 so that all 50 calls reach
// the replica), every call completes — none is reported failed while it
// may run — and the replica is never marked suspect. The ping's and the
// joins' longest answer times are logged (the figures of
// docs/RELIABILITY.md). GRADIOPOOL_REAL_THREADS names one or two URLs of
// the app: with two, the pool half runs on the first and the front-door
// half on the second, at once. Skipped without it.
func TestRealThreadStarved(t *testing.T) {
	v := os.Getenv(envRealThreads)
	if v == "" {
		t.Skip(envRealThreads + " is not set (one or two URLs of testdata/realgradio/threads_app.py on Gradio 5.49.1)")
	}
	urls := strings.Split(v, ",")
	pu, fu := strings.TrimSpace(urls[0]), strings.TrimSpace(urls[len(urls)-1])
	t.Run("all", func(t *testing.T) {
		t.Run("pool", func(t *testing.T) {
			if pu != fu {
				t.Parallel()
			}
			starvedPool(t, pu)
		})
		t.Run("front_door", func(t *testing.T) {
			if pu != fu {
				t.Parallel()
			}
			starvedFrontDoor(t, fu)
		})
	})
}

// starvedGateway is a gateway (front door included) over u at the default
// settings but max_connections 60, its pool's suspect and ejected events
// recorded.
func starvedGateway(t *testing.T, u string) (*httptest.Server, *pool.Pool, *fdtest.StarvedRecorder) {
	t.Helper()
	rec := &fdtest.StarvedRecorder{}
	srv, _, p := frontGatewayOver(t, []string{u}, func(c *gateway.Config) {
		c.Pool = pool.Config{Replicas: []string{u}, MaxConnections: 60, OnEvent: rec.OnEvent}
	})
	return srv, p, rec
}

// pingWatch asks u's /app_id (the gateway's ping route) every 2 s until
// stop is closed and returns the longest answer time seen.
func pingWatch(u string, stop <-chan struct{}) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		defer func() { out <- worst }()
		for i := 0; i < 600; i++ { // bounded: 20 min at most
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(u, "/")+"/gradio_api/app_id", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cancel()
			worst = max(worst, time.Since(start))
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return out
}

func starvedPool(t *testing.T, u string) {
	srv, p, rec := starvedGateway(t, u)
	_ = srv
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	ping := pingWatch(u, stop)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, starvedCalls)
	for i := range starvedCalls {
		wg.Go(func() {
			r, err := p.Predict(ctx, "", "slow", starvedSeconds)
			switch {
			case err != nil:
				errs <- fmt.Errorf("call %d: %w", i, err)
			case len(r.Data) != 1 || !strings.Contains(string(r.Data[0]), "slept"):
				errs <- fmt.Errorf("call %d: answer %v", i, r.Data)
			}
		})
	}
	wg.Wait()
	close(stop)
	close(errs)
	failed := 0
	for err := range errs {
		failed++
		t.Error(err)
	}
	suspect := rec.Suspect()
	for _, s := range suspect {
		t.Errorf("the busy replica was treated as dead: %s", s)
	}
	t.Logf("pool: %d/%d calls of slow(%d) completed in %v; longest /app_id answer %v; suspect/ejected events %d",
		starvedCalls-failed, starvedCalls, starvedSeconds, time.Since(start).Round(100*time.Millisecond), (<-ping).Round(100*time.Millisecond), len(suspect))
}

func starvedFrontDoor(t *testing.T, u string) {
	srv, _, rec := starvedGateway(t, u)
	slow := strconv.Itoa(fdtest.FnIndex(t, srv.URL, "slow"))
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	ping := pingWatch(u, stop)
	start := time.Now()
	type outcome struct {
		join time.Duration
		err  error
	}
	outs := make(chan outcome, starvedCalls)
	var wg sync.WaitGroup
	for i := range starvedCalls {
		wg.Go(func() {
			joined, err := frontDoorCall(ctx, srv.URL, "starved"+strconv.Itoa(i), `"data":[`+strconv.Itoa(starvedSeconds)+`],"fn_index":`+slow)
			outs <- outcome{joined, err}
		})
	}
	wg.Wait()
	close(stop)
	close(outs)
	failed := 0
	var longestJoin time.Duration
	for o := range outs {
		longestJoin = max(longestJoin, o.join)
		if o.err != nil {
			failed++
			t.Errorf("a front-door call failed on the replica short of threads: %v", o.err)
		}
	}
	suspect := rec.Suspect()
	for _, s := range suspect {
		t.Errorf("the busy replica was treated as dead: %s", s)
	}
	t.Logf("front door: %d/%d calls of slow(%d) completed in %v; longest join answer %v; longest /app_id answer %v; suspect/ejected events %d",
		starvedCalls-failed, starvedCalls, starvedSeconds, time.Since(start).Round(100*time.Millisecond), longestJoin.Round(100*time.Millisecond), (<-ping).Round(100*time.Millisecond), len(suspect))
}

// frontDoorCall joins body in session at the front door base, reads the
// session's stream to the call's process_completed and returns how long
// the join took to be answered, and nil when the call succeeded with an
// output.
func frontDoorCall(ctx context.Context, base, session, body string) (joined time.Duration, err error) {
	t0 := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/gradio_api/queue/join",
		strings.NewReader(`{`+body+`,"session_hash":"`+session+`","event_data":null,"trigger_id":null}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Since(t0), fmt.Errorf("join: %w", err)
	}
	jb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	joined = time.Since(t0).Round(100 * time.Millisecond)
	if resp.StatusCode != http.StatusOK {
		return joined, fmt.Errorf("join answered %d after %v: %s", resp.StatusCode, joined, jb)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/gradio_api/queue/data?session_hash="+session, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		return joined, fmt.Errorf("stream (join answered after %v): %w", joined, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			Msg     string          `json:"msg"`
			Success bool            `json:"success"`
			Output  json.RawMessage `json:"output"`
		}
		if json.Unmarshal([]byte(d), &m) != nil || m.Msg != "process_completed" {
			continue
		}
		if !m.Success || !strings.Contains(string(m.Output), "slept") {
			return joined, fmt.Errorf("completed without success (join answered after %v): %s", joined, d)
		}
		return joined, nil
	}
	return joined, fmt.Errorf("the stream ended without the call's completion (join answered after %v): %v", joined, sc.Err())
}
