package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// boundsApp: "big" answers a string of the asked length; "endless" yields
// 10 KB chunks until cancelled; "chunks" yields 12 chunks of 10 KB, one
// every 20 ms.
func boundsApp() *gradiotest.App {
	app := gradiotest.NewApp()
	app.Handle("big", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		n, _ := c.Float(0)
		return []any{strings.Repeat("x", int(n))}, nil
	}, []gradiotest.Component{gradiotest.Number("n")}, nil)
	chunk := strings.Repeat("y", 10_000)
	app.HandleGenerator("endless", func(ctx context.Context, c *gradiotest.Call, yield func(...any) error) error {
		for {
			if err := yield(chunk); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}, nil, nil)
	app.HandleGenerator("chunks", func(ctx context.Context, c *gradiotest.Call, yield func(...any) error) error {
		for range 12 {
			if err := yield(chunk); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}, nil, nil)
	return app
}

// restEvents reads a /gradio_api/call GET to its end: the event names and
// the last event's data.
func restEvents(t *testing.T, url string) ([]string, string) {
	t.Helper()
	a := do(t, "GET", url, "")
	var names []string
	last := ""
	for _, line := range strings.Split(a.body, "\n") {
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		} else if d, ok := strings.CutPrefix(line, "data: "); ok {
			last = d
		}
	}
	return names, last
}

func restPost(t *testing.T, base, api, body string) (int, string, answer) {
	t.Helper()
	a := do(t, "POST", base+"/gradio_api/call/"+api, body)
	var v struct {
		EventID string `json:"event_id"`
	}
	_ = json.Unmarshal([]byte(a.body), &v)
	return a.status, v.EventID, a
}

// TestPendingCallBounds tries to exceed each bound of /gradio_api/call
// results (issue 20 "Why" 5): the calls one client keeps (429, and a
// result read to its end is freed at once, giving the place back), the
// bytes one result keeps (the call ends with result_too_large), and a
// generator nobody reads (stopped at the bound, the heap it holds bounded);
// a generator whose output is read as it comes passes the byte bound
// untouched.
func TestPendingCallBounds(t *testing.T) {
	const maxResult = 64 << 10
	srv, g, sims, _, _ := frontGatewayApps(t, []*gradiotest.App{boundsApp()}, func(c *gateway.Config) {
		c.MaxPendingCallsPerClient = 3
		c.MaxPendingResultBytes = maxResult
	})
	var ids []string
	for range 3 {
		st, id, a := restPost(t, srv.URL, "big", `{"data":[10]}`)
		if st != 200 {
			t.Fatalf("POST: %d %s", st, a.body)
		}
		ids = append(ids, id)
	}
	if st, _, a := restPost(t, srv.URL, "big", `{"data":[10]}`); st != 429 || errorCode(t, a.body) != "too_many_pending_calls" || a.header.Get("Retry-After") == "" {
		t.Fatalf("POST past max_pending_calls_per_client: %d %s, want 429 too_many_pending_calls with Retry-After", st, a.body)
	}
	if names, _ := restEvents(t, srv.URL+"/gradio_api/call/big/"+ids[0]); len(names) == 0 || names[len(names)-1] != "complete" {
		t.Fatalf("reading a kept result: %v", names)
	}
	if names, last := restEvents(t, srv.URL+"/gradio_api/call/big/"+ids[0]); len(names) != 1 || names[0] != "error" || !strings.Contains(last, "404") {
		t.Fatalf("a result read to its end is freed: a second GET got %v %s, want error 404", names, last)
	}
	if st, id, a := restPost(t, srv.URL, "big", `{"data":[10]}`); st != 200 {
		t.Fatalf("POST after a result was read: %d %s", st, a.body)
	} else {
		ids = append(ids, id)
	}
	for _, id := range ids[1:] {
		restEvents(t, srv.URL+"/gradio_api/call/big/"+id)
	}

	// One result over the byte bound.
	_, id, _ := restPost(t, srv.URL, "big", `{"data":[100000]}`)
	if names, last := restEvents(t, srv.URL+"/gradio_api/call/big/"+id); names[len(names)-1] != "error" || !strings.Contains(last, "result_too_large") {
		t.Fatalf("result of 100 kB over max_pending_result_bytes 64 KiB: %v %s, want error result_too_large", names, last)
	}

	// A generator nobody reads: stopped at the bound.
	_, id, _ = restPost(t, srv.URL, "endless", `{"data":["go"]}`)
	fdtest.WaitFor(t, "the unread generator stopped", func() bool {
		return sims[0].Snapshot().Running == 0 && sims[0].Snapshot().Executions["endless"] == 1
	})
	if n, bytes := g.PendingCalls(); n != 1 || bytes > maxResult+1000 {
		t.Fatalf("kept: %d calls, %d bytes unread; want 1 call within %d bytes", n, bytes, maxResult)
	}
	if names, last := restEvents(t, srv.URL+"/gradio_api/call/endless/"+id); names[len(names)-1] != "error" || !strings.Contains(last, "result_too_large") {
		t.Fatalf("unread endless generator: %v, last %s; want it ended by result_too_large", names, last)
	}

	// A generator read as it comes: 120 kB in all, never 64 KiB unread.
	_, id, _ = restPost(t, srv.URL, "chunks", `{"data":["go"]}`)
	names, _ := restEvents(t, srv.URL+"/gradio_api/call/chunks/"+id)
	if len(names) != 13 || names[12] != "complete" {
		t.Fatalf("read generator: %d events, last %v; want 12 generating and complete", len(names), names[len(names)-1])
	}
	if n, bytes := g.PendingCalls(); n != 0 || bytes != 0 {
		t.Fatalf("after every result was read: %d calls, %d bytes kept; want none", n, bytes)
	}
}
