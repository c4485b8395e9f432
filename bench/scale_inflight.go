package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// scaleInFlight holds 150 long calls open through the pool (50 per replica,
// the seed's maximum) and measures the memory each one costs.
func scaleInFlight(ctx context.Context, e *env, s *Section) error {
	const calls = 150
	hold := e.pick(8*time.Second, 2*time.Second)
	if raceEnabled && e.opts.Quick {
		hold = 3 * time.Second // the race detector slows the 150 Submits down
	}
	sm, err := e.startSims(ctx, simSpec{Replicas: 3}, true)
	if err != nil {
		return err
	}
	defer sm.Close()
	where := "in a separate process, so the figures are the pool's and the client's alone"
	if !sm.Remote {
		where = "inside this process (no helper-process command), so the figures include the simulated servers' own share of each call"
	}
	base := ReadMem()
	p, err := pool.New(pool.Config{Replicas: sm.URLs, MinConnections: 50, MaxConnections: 50, QueueTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	user := func(i int) string { return fmt.Sprintf("user%d@example.com", i) }
	// Warm 150 sessions: 150 short calls at once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var warmErr error
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Predict(ctx, user(i), "slow", 0.3); err != nil {
				mu.Lock()
				warmErr = errors.Join(warmErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if warmErr != nil {
		return fmt.Errorf("warming 150 sessions: %w", warmErr)
	}
	warm := ReadMem()
	total := statsNumbers(p)["totalConnections"]

	// 150 long calls, streamed (Submit + events), held open for hold.
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := p.Submit(callCtx, user(i), "slow", hold.Seconds())
			if err != nil {
				errs <- err
				return
			}
			for range c.Events() {
				// Drain the stream as a streaming caller would.
			}
			_, err = c.Wait(callCtx)
			errs <- err
		}()
	}
	// Wait until every call is in flight.
	deadline := time.Now().Add(hold / 2)
	for statsNumbers(p)["inUseConnections"] < calls && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	inUse := statsNumbers(p)["inUseConnections"]
	held := ReadMem()
	wg.Wait()
	close(errs)
	failed := 0
	var firstErr error
	for err := range errs {
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if inUse < calls {
		return fmt.Errorf("only %.0f of %d calls were in flight at once (failed: %d, first error: %v)", inUse, calls, failed, firstErr)
	}
	d := held.Sub(warm)
	sess := warm.Sub(base)
	perCall := float64(d.Total()) / calls
	s.Tables = append(s.Tables, Table{
		Caption: fmt.Sprintf("Calls in flight: %d long calls (`slow`, %s each, time-compressed from the seed's 5-10 minutes; each is a `Submit` whose event stream stays open) through `pool.Pool` to three replicas at 50 sessions each. The replicas ran %s.", calls, hold, where),
		Header:  []string{"what", "heap", "stacks", "goroutines", "per unit (heap + stacks)"},
		Rows: [][]string{
			{fmt.Sprintf("%.0f idle warm sessions (vs empty)", total), kib(float64(sess.Heap)), kib(float64(sess.Stack)), fmt.Sprint(sess.Goroutines), fmt.Sprintf("%s per session, %.1f goroutines", kib(float64(sess.Total())/max(1, total)), float64(sess.Goroutines)/max(1, total))},
			{fmt.Sprintf("%d calls in flight (vs idle warm pool)", calls), kib(float64(d.Heap)), kib(float64(d.Stack)), fmt.Sprint(d.Goroutines), fmt.Sprintf("%s per call, %.1f goroutines", kib(perCall), float64(d.Goroutines)/calls)},
		},
	})
	if failed > 0 {
		s.note("calls in flight: %d of %d long calls failed (first: %v)", failed, calls, firstErr)
	}
	s.note("the caller's own goroutine per call (here the harness's) is counted in the in-flight figures: a gateway has one HTTP handler goroutine per call anyway.")
	e.inFlightPool = newPerCallMem(d, calls)
	return nil
}

// scaleInFlightGateway holds 150 long calls open through the gateway, the
// callers being HTTP clients (POST /v1/submit, event stream read to the
// end) in a helper process, so that this process holds only the gateway,
// the pool and the Go client: the deployed shape.
func scaleInFlightGateway(ctx context.Context, e *env, s *Section) error {
	const calls = 150
	hold := e.pick(8*time.Second, 2*time.Second)
	if raceEnabled && e.opts.Quick {
		hold = 3 * time.Second
	}
	if len(e.opts.Self) == 0 {
		return fmt.Errorf("needs a helper process for the HTTP callers (Options.Self)")
	}
	sm, err := e.startSims(ctx, simSpec{Replicas: 3}, true)
	if err != nil {
		return err
	}
	defer sm.Close()
	p, err := pool.New(pool.Config{Replicas: sm.URLs, MinConnections: 50, MaxConnections: 50, QueueTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	gw, err := startGateway(p, 50)
	if err != nil {
		return err
	}
	defer gw.Close()
	// Warm 150 sessions through the gateway first.
	if r, err := e.runCallers(ctx, callersSpec{URL: gw.URL, N: calls, API: "slow", Seconds: 0.3}); err != nil {
		return fmt.Errorf("warming: %w", err)
	} else if r.Failed > 0 {
		return fmt.Errorf("warming: %d calls failed (first: %s)", r.Failed, r.FirstError)
	}
	warm := ReadMem()
	type callersOut struct {
		res *callersResult
		err error
	}
	done := make(chan callersOut, 1)
	go func() {
		r, err := e.runCallers(ctx, callersSpec{URL: gw.URL, N: calls, API: "slow", Seconds: hold.Seconds()})
		done <- callersOut{r, err}
	}()
	deadline := time.Now().Add(hold * 3 / 4)
	for statsNumbers(p)["inUseConnections"] < calls && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	inUse := statsNumbers(p)["inUseConnections"]
	held := ReadMem()
	out := <-done
	if out.err != nil {
		return out.err
	}
	if inUse < calls {
		return fmt.Errorf("only %.0f of %d calls were in flight at once (callers: %d ok, %d failed, first error %q)", inUse, calls, out.res.OK, out.res.Failed, out.res.FirstError)
	}
	d := held.Sub(warm)
	perCall := float64(d.Total()) / calls
	s.Tables = append(s.Tables, Table{
		Caption: fmt.Sprintf("Calls in flight through the gateway: the same %d long calls as `POST /v1/submit/slow` from HTTP callers in a helper process, each reading its event stream to the end; this process holds only the gateway, the pool and the Go client (replicas in a third process).", calls),
		Header:  []string{"what", "heap", "stacks", "goroutines", "per call (heap + stacks)", "callers ok / failed"},
		Rows: [][]string{{
			fmt.Sprintf("%d calls in flight via the gateway (vs idle warm gateway)", calls), kib(float64(d.Heap)), kib(float64(d.Stack)), fmt.Sprint(d.Goroutines),
			kib(perCall), fmt.Sprintf("%d / %d", out.res.OK, out.res.Failed),
		}},
	})
	e.inFlightGateway = newPerCallMem(d, calls)
	return nil
}

// callersSpec configures the "callers" helper process.
type callersSpec struct {
	URL     string  `json:"url"`
	N       int     `json:"n"`
	API     string  `json:"api"`
	Seconds float64 `json:"seconds"`
}

type callersResult struct {
	OK         int    `json:"ok"`
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
}

func (e *env) runCallers(ctx context.Context, spec callersSpec) (*callersResult, error) {
	b, _ := json.Marshal(spec)
	cmd := e.childCommand(ctx, "callers", string(b))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("callers process: %v: %s", err, lastLines(stderr.String(), 3))
	}
	var r callersResult
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("callers process printed %q", lastLines(string(out), 2))
	}
	return &r, nil
}

// childCallers opens spec.N streaming calls at once through the gateway and
// reads each event stream to its end.
func childCallers(ctx context.Context, config string, stdout io.Writer) error {
	var spec callersSpec
	if err := json.Unmarshal([]byte(config), &spec); err != nil {
		return fmt.Errorf("bench: callers child config: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: spec.N}}
	body := fmt.Sprintf(`{"data":[%g]}`, spec.Seconds)
	var res callersResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range spec.N {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := streamCall(ctx, client, spec.URL+"/v1/submit/"+spec.API, fmt.Sprintf("user%d@example.com", i), body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed++
				if res.FirstError == "" {
					res.FirstError = err.Error()
				}
				return
			}
			res.OK++
		}()
	}
	wg.Wait()
	b, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "%s\n", b)
	return nil
}

// streamCall is one POST /v1/submit read to the end of its event stream.
func streamCall(ctx context.Context, client *http.Client, url, user, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gradiopool-User", user)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("http %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "event: complete") {
		return fmt.Errorf("stream ended without a complete event: %q", lastLines(string(b), 2))
	}
	return nil
}
