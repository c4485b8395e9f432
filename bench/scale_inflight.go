package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// scaleInFlight holds 150 long calls open through the pool (50 per replica,
// the seed's maximum) and measures the memory each one costs.
func scaleInFlight(ctx context.Context, e *env, s *Section) error {
	const calls = 150
	hold := e.pick(6*time.Second, 2*time.Second)
	if raceEnabled && e.opts.Quick {
		hold = 3 * time.Second // the race detector slows the 150 Submits down
	}
	sm, err := e.startSims(ctx, simSpec{Replicas: 3})
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
	time.Sleep(500 * time.Millisecond)
	idle := readMemMedian(3, 100*time.Millisecond)
	total := statsNumbers(p)["totalConnections"]
	sess := idle.Sub(base)

	// One repetition: 150 long calls, streamed (Submit + events), held open
	// for hold; memory read while all of them run, against the idle warm
	// pool just before.
	once := func() (MemDelta, int, error) {
		time.Sleep(500 * time.Millisecond) // let the last calls' streams and connections settle
		warm := readMemMedian(3, 100*time.Millisecond)
		warmCensus := goroutineCensus()
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
		// Wait until every call runs at its replica: its session is taken
		// and its event stream open (the replica has sent process_starts).
		running := sm.waitRunning(ctx, calls, time.Now().Add(hold*3/4))
		time.Sleep(50 * time.Millisecond) // let the client read process_starts
		inUse := statsNumbers(p)["inUseConnections"]
		held := readMemMedian(3, hold/8)
		e.inFlightPoolCensus = censusDelta(goroutineCensus(), warmCensus)
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
		if inUse < calls || running < calls {
			return MemDelta{}, failed, fmt.Errorf("only %.0f of %d calls were in flight at once, %d running at the replicas (failed: %d, first error: %v)", inUse, calls, running, failed, firstErr)
		}
		if failed > 0 {
			s.note("calls in flight: %d of %d long calls failed (first: %v)", failed, calls, firstErr)
		}
		return held.Sub(warm), failed, nil
	}
	t := Table{
		Caption: fmt.Sprintf("Calls in flight: %d long calls (`slow`, %s each, time-compressed from the seed's 5-10 minutes; each is a `Submit` whose event stream stays open) "+
			"through `pool.Pool` to three replicas at 50 sessions each, %s; the median repetition (by heap + stacks) counts for the target. The replicas ran %s.",
			calls, hold, repsText(e.inFlightReps()), where),
		Header: []string{"what", "heap", "stacks", "goroutines", "per unit (heap + stacks)"},
		Rows: [][]string{
			{fmt.Sprintf("%.0f idle warm sessions (vs empty)", total), kib(float64(sess.Heap)), kib(float64(sess.Stack)), fmt.Sprint(sess.Goroutines), fmt.Sprintf("%s per session, %.1f goroutines", kib(float64(sess.Total())/max(1, total)), float64(sess.Goroutines)/max(1, total))},
		},
	}
	var deltas []MemDelta
	for rep := range e.inFlightReps() {
		d, _, err := once()
		if err != nil {
			return err
		}
		deltas = append(deltas, d)
		t.Rows = append(t.Rows, inFlightRow(fmt.Sprintf("%d calls in flight (vs idle warm pool), repetition %d", calls, rep+1), d, calls))
	}
	s.Tables = append(s.Tables, t)
	s.note("the caller's own goroutine per call (here the harness's) is counted in the in-flight figures: a gateway has one HTTP handler goroutine per call anyway.")
	e.inFlightPool = newPerCallMem(medianDelta(deltas), calls)
	return nil
}

// inFlightReps is how many times each in-flight measurement is repeated:
// the figure moves from one repetition to the next with the goroutines and
// connections that happen to be alive.
func (e *env) inFlightReps() int { return e.pickInt(3, 1) }

func repsText(n int) string {
	if n == 1 {
		return "measured once"
	}
	return fmt.Sprintf("measured %d times in a row", n)
}

func inFlightRow(what string, d MemDelta, calls int) []string {
	return []string{what, kib(float64(d.Heap)), kib(float64(d.Stack)), fmt.Sprint(d.Goroutines),
		fmt.Sprintf("%s per call, %.1f goroutines", kib(float64(d.Total())/float64(calls)), float64(d.Goroutines)/float64(calls))}
}

// medianDelta returns the delta with the median heap + stack total.
func medianDelta(ds []MemDelta) MemDelta {
	ds = slices.Clone(ds)
	sortBy(ds, func(d MemDelta) float64 { return float64(d.Total()) })
	return ds[len(ds)/2]
}

// scaleInFlightGateway holds 150 long calls open through the gateway, the
// callers being HTTP clients (POST /v1/submit, event stream read to the
// end) in a helper process, so that this process holds only the gateway,
// the pool and the Go client: the deployed shape.
func scaleInFlightGateway(ctx context.Context, e *env, s *Section) error {
	const calls = 150
	hold := e.pick(6*time.Second, 2*time.Second)
	if raceEnabled && e.opts.Quick {
		hold = 3 * time.Second
	}
	if len(e.opts.Self) == 0 {
		return fmt.Errorf("needs a helper process for the HTTP callers (Options.Self)")
	}
	sm, err := e.startSims(ctx, simSpec{Replicas: 3})
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
	once := func() (MemDelta, *callersResult, error) {
		time.Sleep(500 * time.Millisecond) // let the last calls' streams and connections settle
		warm := readMemMedian(3, 100*time.Millisecond)
		warmCensus := goroutineCensus()
		type callersOut struct {
			res *callersResult
			err error
		}
		done := make(chan callersOut, 1)
		go func() {
			r, err := e.runCallers(ctx, callersSpec{URL: gw.URL, N: calls, API: "slow", Seconds: hold.Seconds()})
			done <- callersOut{r, err}
		}()
		running := sm.waitRunning(ctx, calls, time.Now().Add(hold*3/4))
		time.Sleep(50 * time.Millisecond) // let the gateway relay process_starts
		inUse := statsNumbers(p)["inUseConnections"]
		held := readMemMedian(3, hold/8)
		e.inFlightGatewayCensus = censusDelta(goroutineCensus(), warmCensus)
		out := <-done
		if out.err != nil {
			return MemDelta{}, nil, out.err
		}
		if inUse < calls || running < calls {
			return MemDelta{}, nil, fmt.Errorf("only %.0f of %d calls were in flight at once, %d running at the replicas (callers: %d ok, %d failed, first error %q)", inUse, calls, running, out.res.OK, out.res.Failed, out.res.FirstError)
		}
		return held.Sub(warm), out.res, nil
	}
	t := Table{
		Caption: fmt.Sprintf("Calls in flight through the gateway: the same %d long calls as `POST /v1/submit/slow` from HTTP callers in a helper process, each reading its event stream to the end, %s; "+
			"this process holds only the gateway, the pool and the Go client (replicas in a third process).", calls, repsText(e.inFlightReps())),
		Header: []string{"what", "heap", "stacks", "goroutines", "per call (heap + stacks)", "callers ok / failed"},
	}
	var deltas []MemDelta
	for rep := range e.inFlightReps() {
		d, res, err := once()
		if err != nil {
			return err
		}
		deltas = append(deltas, d)
		t.Rows = append(t.Rows, append(inFlightRow(fmt.Sprintf("%d calls in flight via the gateway (vs idle warm gateway), repetition %d", calls, rep+1), d, calls),
			fmt.Sprintf("%d / %d", res.OK, res.Failed)))
	}
	s.Tables = append(s.Tables, t)
	e.inFlightGateway = newPerCallMem(medianDelta(deltas), calls)
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

// readMemMedian reads memory n times, gap apart, and returns the reading
// with the median heap + stack total: calls in flight come with short-lived
// goroutines and buffers (stream reads, timers), and one reading can catch
// more or fewer of them than usual.
func readMemMedian(n int, gap time.Duration) Mem {
	ms := make([]Mem, 0, n)
	for i := range n {
		if i > 0 {
			time.Sleep(gap)
		}
		ms = append(ms, ReadMem())
	}
	sortBy(ms, func(m Mem) float64 { return float64(m.HeapAlloc + m.StackInuse) })
	return ms[len(ms)/2]
}
