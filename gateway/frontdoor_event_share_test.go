package gateway_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// fdCallFrom is one front-door call (join, then the session's stream until
// its process_completed) from the client that forwarded address xff names
// (the gateway trusts 127.0.0.1 as a proxy); it returns the first output's
// length.
func fdCallFrom(ctx context.Context, base, xff string, fn int) (int, error) {
	var h [8]byte
	_, _ = rand.Read(h[:])
	session := hex.EncodeToString(h[:])
	body, _ := json.Marshal(map[string]any{"data": []any{"x"}, "fn_index": fn, "session_hash": session, "event_data": nil, "trigger_id": nil})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/gradio_api/queue/join", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", xff)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("join: %d %s", resp.StatusCode, b)
	}
	req, _ = http.NewRequestWithContext(ctx, "GET", base+"/gradio_api/queue/data?session_hash="+session, nil)
	req.Header.Set("X-Forwarded-For", xff)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			Msg     string `json:"msg"`
			Success bool   `json:"success"`
			Output  struct {
				Data  []string `json:"data"`
				Error string   `json:"error"`
			} `json:"output"`
		}
		if json.Unmarshal([]byte(d), &m) != nil || m.Msg != "process_completed" {
			continue
		}
		if !m.Success || len(m.Output.Data) != 1 {
			return 0, fmt.Errorf("completed: %s", m.Output.Error)
		}
		return len(m.Output.Data[0]), nil
	}
	return 0, fmt.Errorf("stream ended: %v", sc.Err())
}

// TestFrontDoorGreedyClientCannotTakeTheEventBudget (issue 33 item 2): on
// the front door, one client (a forwarded address behind a trusted proxy)
// pulling 3.9 MiB outputs from 12 sessions at once does not make another
// client's 0.56 MiB outputs on the same replica fail: the front door's
// relays are charged to their session's client inside the replica's part
// of upstream_event_bytes (16 MiB here), and the greedy client's streams
// are cut for the other's.
func TestFrontDoorGreedyClientCannotTakeTheEventBudget(t *testing.T) {
	const (
		huge   = 63 << 16
		big    = 9 << 16
		greedy = 12
		others = 8
		rounds = 3
	)
	app := &gradiotest.App{Title: "outputs"}
	for name, n := range map[string]int{"big": big, "huge": huge} {
		app.Handle(name, func(context.Context, *gradiotest.Call) ([]any, error) {
			return []any{strings.Repeat("o", n)}, nil
		}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	}
	srv, _, _, _, _ := frontGatewayApps(t, []*gradiotest.App{app}, func(c *gateway.Config) {
		c.TrustedProxies = []string{"127.0.0.1/32"}
		c.UpstreamEventBytes = 16 << 20
		c.MaxCallsPerClient = 64
		c.Pool.MaxConnections = greedy + others
		c.Pool.MinConnections = -1
	})
	fnBig, fnHuge := fdtest.FnIndex(t, srv.URL, "big"), fdtest.FnIndex(t, srv.URL, "huge")
	otherRound := func() (ok int) {
		var wg sync.WaitGroup
		var n atomic.Int64
		for range others {
			wg.Go(func() {
				got, err := fdCallFrom(context.Background(), srv.URL, "198.51.100.2", fnBig)
				if err == nil && got == big {
					n.Add(1)
				} else {
					t.Logf("other client's call: %d bytes, %v", got, err)
				}
			})
		}
		wg.Wait()
		return int(n.Load())
	}
	baseline := 0
	for range rounds {
		baseline += otherRound()
	}
	gctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var gOK, gFailed atomic.Int64
	for range greedy {
		wg.Go(func() {
			for gctx.Err() == nil {
				if _, err := fdCallFrom(gctx, srv.URL, "198.51.100.1", fnHuge); err == nil {
					gOK.Add(1)
				} else if gctx.Err() == nil {
					gFailed.Add(1)
				}
			}
		})
	}
	for i := 0; gOK.Load()+gFailed.Load() == 0; i++ { // the race detector makes a 3.9 MiB answer slow
		if i > 24000 {
			t.Fatal("no greedy call ended in 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	beside := 0
	for range rounds {
		beside += otherRound()
	}
	stop()
	wg.Wait()
	if n := rounds * others; baseline != n || beside != n {
		t.Errorf("the other client's calls ok: %d/%d alone, %d/%d beside the greedy client", baseline, n, beside, n)
	}
	t.Logf("other client %d/%d ok alone, %d/%d beside the greedy client (%d ok, %d failed)",
		baseline, rounds*others, beside, rounds*others, gOK.Load(), gFailed.Load())
}
