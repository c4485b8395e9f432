package reliability_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
)

// tally is what the load saw during one cell.
type tally struct {
	mu           sync.Mutex
	sent         int
	results      int
	codes        map[string]int // typed JSON errors by code
	transport    map[string]int // no HTTP answer at all (connection refused, reset)
	untyped      int            // an answer that is neither a result nor a typed error
	late         int            // ended after its deadline plus slack
	disconnected int            // calls whose caller went away on purpose
	examples     []string       // of untyped answers, for the log
	unanswered   []string       // ids of calls that got no HTTP answer
	lateOnes     []string       // of late calls, for the log
}

func newTally() *tally { return &tally{codes: map[string]int{}, transport: map[string]int{}} }

func (t *tally) add(f func(t *tally)) {
	t.mu.Lock()
	f(t)
	t.mu.Unlock()
}

func (t *tally) codeList() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return joinCounts(t.codes)
}

func (t *tally) transportList() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return joinCounts(t.transport)
}

func joinCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// loadConfig shapes the steady load.
type loadConfig struct {
	workers  int
	deadline time.Duration // X-Gradiopool-Timeout of every call
	slack    time.Duration // a call ending later than deadline+slack is late
	// disconnect, when > 0, is the share of calls whose caller goes away
	// at a random moment within the first 400 ms (waiting, connecting,
	// joined or streaming).
	disconnect float64
}

var callSeq atomic.Int64

// load runs lc.workers callers until ctx ends: three calls in four through
// /v1/predict, one through /v1/submit (an event stream), registered users
// and anonymous ones mixed.
func (e *env) load(ctx context.Context, lc loadConfig, t *tally) {
	var wg sync.WaitGroup
	for w := range lc.workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if !e.call(lc, t, w) {
					time.Sleep(20 * time.Millisecond) // no gateway: do not spin
				}
			}
		})
	}
	wg.Wait()
}

// call makes one call; false when the gateway gave no HTTP answer.
func (e *env) call(lc loadConfig, t *tally, worker int) bool {
	id := fmt.Sprintf("c%d", callSeq.Add(1))
	// Workers go to the gateways in pairs, so that each gets registered
	// users (even workers) and anonymous callers.
	g := (worker / 2) % len(e.urls)
	for range len(e.urls) { // a dead gateway gets no calls: the next one
		if !e.down[g].Load() {
			break
		}
		g = (g + 1) % len(e.urls)
	}
	url := e.urls[g]
	if len(e.urls) > 1 {
		id += fmt.Sprintf("-g%d", g)
	}
	stream := rand.IntN(4) == 0
	path := "/v1/predict/work"
	if stream {
		path = "/v1/submit/work"
	}
	ctx, cancel := context.WithTimeout(context.Background(), lc.deadline+lc.slack+5*time.Second)
	defer cancel()
	leave := lc.disconnect > 0 && rand.Float64() < lc.disconnect
	if leave {
		time.AfterFunc(time.Duration(rand.Int64N(int64(400*time.Millisecond))), cancel)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(`{"data":["`+id+`"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(gateway.TimeoutHeader, lc.deadline.String())
	if worker%2 == 0 {
		req.Header.Set(gateway.UserHeader, fmt.Sprintf("user%d@example.com", worker))
	}
	t.add(func(t *tally) { t.sent++ })
	start := time.Now()
	resp, err := e.client.Do(req)
	var kind, code, detail string
	if err == nil {
		kind, code, detail = classify(resp, stream, id)
		resp.Body.Close()
	}
	took := time.Since(start)
	t.add(func(t *tally) {
		switch {
		case leave && (err != nil || kind != "result"):
			t.disconnected++
			return
		case err != nil:
			k := transportKind(err)
			t.transport[k]++
			t.unanswered = append(t.unanswered, id)
			if k != "conn_refused" && len(t.examples) < 5 {
				t.examples = append(t.examples, clip(err.Error()))
			}
		case kind == "result":
			t.results++
		case kind == "error":
			t.codes[code]++
		default:
			t.untyped++
			if len(t.examples) < 5 {
				t.examples = append(t.examples, detail)
			}
		}
		if took > lc.deadline+lc.slack {
			t.late++
			if len(t.lateOnes) < 5 {
				t.lateOnes = append(t.lateOnes, fmt.Sprintf("%s %s %s after %v (%s)", id, path, kind+" "+code, took.Round(time.Millisecond), start.Format("15:04:05.000")))
			}
		}
	})
	return err == nil
}

// classify reads one answer: "result", "error" (typed, with its code) or
// "untyped" (with a description).
func classify(resp *http.Response, stream bool, id string) (kind, code, detail string) {
	if stream && resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return classifyStream(resp.Body, id)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "untyped", "", fmt.Sprintf("%d, body cut: %v", resp.StatusCode, err)
	}
	if resp.StatusCode == http.StatusOK {
		var out struct {
			Data []string `json:"data"`
		}
		if json.Unmarshal(b, &out) == nil && len(out.Data) == 1 && out.Data[0] == id {
			return "result", "", ""
		}
		return "untyped", "", fmt.Sprintf("200 %q", clip(string(b)))
	}
	if c := errorCode(b); c != "" {
		return "error", c, ""
	}
	return "untyped", "", fmt.Sprintf("%d %q", resp.StatusCode, clip(string(b)))
}

func classifyStream(r io.Reader, id string) (kind, code, detail string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := []byte(strings.TrimPrefix(line, "data: "))
			switch event {
			case "complete":
				var out struct {
					Data []string `json:"data"`
				}
				if json.Unmarshal(data, &out) == nil && len(out.Data) == 1 && out.Data[0] == id {
					return "result", "", ""
				}
				return "untyped", "", "complete " + clip(string(data))
			case "error":
				if c := errorCode(data); c != "" {
					return "error", c, ""
				}
				return "untyped", "", "error event " + clip(string(data))
			}
		}
	}
	return "untyped", "", fmt.Sprintf("stream ended without complete or error (%v)", sc.Err())
}

func errorCode(b []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil {
		return ""
	}
	return e.Error.Code
}

func transportKind(err error) string {
	s := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "client_timeout"
	case strings.Contains(s, "server closed idle connection"):
		return "idle_closed"
	case strings.Contains(s, "connection refused"):
		return "conn_refused"
	case strings.Contains(s, "connection reset"), strings.Contains(s, "EOF"):
		return "conn_reset"
	}
	return "other"
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
