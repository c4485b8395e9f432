package frontdoor

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestBridgedResultLeavesTheEventBudget: a bridged call's large output
// counts in the event budget until the bridge has it in the caller's
// messages, not until the Go job is collected (the collector is off here,
// so only the bridge's own release can give it back).
func TestBridgedResultLeavesTheEventBudget(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	app := gradiotest.NewApp()
	app.Handle("big", func(context.Context, *gradiotest.Call) ([]any, error) {
		return []any{strings.Repeat("x", 1<<20)}, nil
	}, []gradiotest.Component{gradiotest.Number("n")}, []gradiotest.Component{gradiotest.Textbox("out")})
	sim := gradiotest.NewUnstartedServer(app)
	sim.Mode = gradiotest.Gradio4SSEv2
	sim.Start()
	defer sim.Close()
	p := poolOver(t, sim.URL, 2)
	f, err := New(p, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mux := http.NewServeMux()
	for _, rt := range f.Routes() {
		mux.HandleFunc(rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/gradio_api/queue/join", "application/json", strings.NewReader(`{"fn_index": 0, "data": [1], "session_hash": "big1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("join: %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/gradio_api/queue/data?session_hash=big1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	completed := false
	for !completed && sc.Scan() {
		completed = strings.Contains(sc.Text(), `"process_completed"`)
	}
	if !completed {
		t.Fatalf("no completion: %v", sc.Err())
	}
	for deadline := time.Now().Add(10 * time.Second); f.Stats().InFlight != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("hang guard: the call is still in flight after its completion")
		}
	}
	c, err := p.App(context.Background(), p.Replicas()[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := c.EventBudget().Held(); n != 0 {
		t.Errorf("the replica's part of the event budget holds %d bytes after the bridged call ended, want 0", n)
	}
}
