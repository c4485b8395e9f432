package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// dialSmallWindow connects to addr with a 4 KiB receive buffer (set before
// the connection is made, so that its window is small): a caller that
// then reads nothing holds its writer at once.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: fdtest.SmallReceiveWindow(4096)}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// smallSendBuffers gives each accepted connection a 4 KiB send buffer,
// so that what a caller that reads nothing leaves unread stays in the
// gateway, where the test sees it, not in the kernel's buffers.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestSlowSubmitReadersCannotTakeTheEventBudget (issue 33 item 2): one
// API key opens 4 /v1/submit streams of a generator of 256 KiB outputs
// and reads none of them (for the test: not at all; an attacker would
// read just fast enough to escape the write stall), beside another key's
// /v1/predict calls of 144 KiB outputs; upstream_event_bytes 4 MiB. The
// outputs waiting for the slow key count against its share of the budget
// (the budget's peak shows them), so its calls end once together they
// hold it, not each at 16 MiB behind; the other key's calls all succeed
// and the replica is charged no error. Before, the waiting outputs were
// outside the budget: the budget's peak stayed at what streams read
// (under 1 MiB), and each call ended only 16 MiB behind (64 outputs).
func TestSlowSubmitReadersCannotTakeTheEventBudget(t *testing.T) {
	const (
		total   = 4 << 20
		size    = 256 << 10
		big     = 9 << 14
		streams = 4
		others  = 8
	)
	var yielded, ended atomic.Int32
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	app := &gradiotest.App{Title: "outputs"}
	app.HandleGenerator("flood", func(ctx context.Context, _ *gradiotest.Call, yield func(...any) error) error {
		defer ended.Add(1)
		for i := range 80 {
			if err := yield(strconv.Itoa(i) + strings.Repeat("f", size)); err != nil {
				return err
			}
			yielded.Add(1)
			// Paced, so that what was sent before a call ended is about
			// what the gateway held, not what it read while its cancel
			// travelled to the app.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gate:
			return nil
		}
	}, []gradiotest.Component{gradiotest.Number("n")}, []gradiotest.Component{gradiotest.Textbox("out")}).ConcurrencyLimit = -1
	app.Handle("big", func(context.Context, *gradiotest.Call) ([]any, error) {
		return []any{strings.Repeat("o", big)}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	_, g, _, p, _ := frontGatewayApps(t, []*gradiotest.App{app}, func(c *gateway.Config) {
		c.Secrets.APIKeys = []string{"slow-key", "other-key"}
		c.UpstreamEventBytes = total
		c.MaxCallsPerClient = 64
		c.Pool.MaxConnections = streams + others
		c.Pool.MinConnections = -1
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, smallSendBuffers{ln}) }()
	t.Cleanup(func() { stop(); <-served })
	base := "http://" + ln.Addr().String()

	body := `{"data":[1]}`
	for range streams {
		c := dialSmallWindow(t, ln.Addr().String())
		defer c.Close() // before the server stops: its handlers' writes end
		fmt.Fprintf(c, "POST /v1/submit/flood HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer slow-key\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	var peak int64
	othersOK := 0
	for i := 0; ended.Load() < streams; i++ { // a hang guard, not a measure
		if i > 12000 {
			t.Fatalf("%d of %d unread calls ended at the app in 2 minutes (%d outputs sent)", ended.Load(), streams, yielded.Load())
		}
		if app := p.ConnectedApp(p.Replicas()[0]); app != nil {
			peak = max(peak, app.EventBudget().Root().Held())
		}
		if i == 50 { // the unread calls hold their backlogs by now: the other key's calls beside them
			var ok atomic.Int32
			done := make(chan struct{})
			for range others {
				go func() {
					defer func() { done <- struct{}{} }()
					if status, code, n := predictAs(context.Background(), base, "other-key", "big"); status == 200 && n == big {
						ok.Add(1)
					} else {
						t.Logf("other key's call: %d %s", status, code)
					}
				}()
			}
			for range others {
				<-done
			}
			othersOK = int(ok.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if othersOK != others {
		t.Errorf("the other key's calls beside the unread ones: %d/%d ok", othersOK, others)
	}
	if peak < total/2 {
		t.Errorf("the event budget held at most %d bytes while 4 calls' outputs waited: their backlog is not counted", peak)
	}
	if y := yielded.Load(); y >= streams*64/2 {
		t.Errorf("%d outputs of 256 KiB sent to %d unread calls before they ended, want about the budget's 16 and what was in flight", y, streams)
	}
	if e := p.Stats(context.Background()).Errors; e != 0 {
		t.Errorf("the replica was charged %d errors", e)
	}
	// What an operator sees: the refusals charged to the slow key, none
	// to the replica.
	if resp, err := http.Get(base + "/metrics"); err != nil {
		t.Error(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := string(b)
		if !strings.Contains(m, `gradiopool_event_budget_cuts_total{fault="replica"} 0`) ||
			strings.Contains(m, `gradiopool_event_budget_cuts_total{fault="caller"} 0`) ||
			!strings.Contains(m, "gradiopool_event_budget_held_bytes ") {
			t.Errorf("metrics of the event budget:\n%s", grepLines(m, "gradiopool_event_budget"))
		}
		t.Logf("%s", grepLines(m, "gradiopool_event_budget_cuts_total{"))
	}
	t.Logf("%d outputs of 256 KiB sent to %d unread calls before they ended; the budget's peak %d of %d bytes; other key %d/%d ok",
		yielded.Load(), streams, peak, total, othersOK, others)
}

// predictAs posts one /v1/predict call of endpoint with API key; n is
// the length of its one output.
func predictAs(ctx context.Context, base, key, endpoint string) (status int, code string, n int) {
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/predict/"+endpoint, strings.NewReader(`{"data":["x"]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error(), 0
	}
	defer resp.Body.Close()
	var body struct {
		Data  []string `json:"data"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if len(body.Data) == 1 {
		n = len(body.Data[0])
	}
	return resp.StatusCode, body.Error.Code, n
}
