package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// Security (issue 16): connections that never finish their headers
// (slowloris), that send nothing, or that sit idle after a request are
// closed by the header and idle time-outs, many at once.
func TestSlowAndIdleConnectionsAreClosed(t *testing.T) {
	g := gateway.New(gateway.Config{Pool: pool.Config{Replicas: []string{"http://r1"}}}, newFake(), nil, nil)
	g.SetConnTimeouts(300*time.Millisecond, 300*time.Millisecond)
	addr, stop := serveFake(t, g)
	defer stop()
	addr = strings.TrimPrefix(addr, "http://")
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan string, 3*n)
	for i := range 3 * n {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer c.Close()
			switch i % 3 {
			case 0: // nothing at all
			case 1: // slowloris: a header line a byte at a time
				go func() {
					for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ") {
						if _, err := c.Write([]byte{b}); err != nil {
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
				}()
			case 2: // one request, then idle on the kept-alive connection
				if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
					errs <- err.Error()
					return
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					errs <- "no answer: " + err.Error()
					return
				}
				resp.Body.Close()
			}
			// The server must close the connection: a read ends. The 10 s
			// bound only stops a hang.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
				errs <- "connection kind " + []string{"silent", "slowloris", "idle"}[i%3] + " not closed: " + err.Error()
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Security (issue 16): deeply nested and oversized bodies get a JSON 4xx.
func TestNestedAndOversizedBodies(t *testing.T) {
	_, srv, _ := newGateway(t, newFake(), func(c *gateway.Config) { c.MaxBodyBytes = 4 << 20 })
	deep := `{"data":[` + strings.Repeat("[", 200000) + strings.Repeat("]", 200000) + `]}`
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"nested 200000 deep", deep, 400},
		{"nested objects", `{"data":[` + strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000) + `]}`, 400},
		{"oversized", `{"data":["` + strings.Repeat("x", 5<<20) + `"]}`, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", srv.URL+"/v1/predict/upper", tc.body)
			if a.status != tc.status || errorCode(t, a.body) == "" || len(a.body) > 1000 {
				t.Fatalf("%d %.300s, want %d", a.status, a.body, tc.status)
			}
		})
	}
}

// Security (issue 16): a file argument naming a local path is passed to
// the replica as it is: the gateway never reads (or uploads) a file of its
// own disk, and the app refuses a path it did not receive.
func TestLocalPathArgumentsAreNotRead(t *testing.T) {
	srv, sims, _ := realGateway(t, 1, nil)
	for _, arg := range []string{
		`{"path":"/etc/passwd","meta":{"_type":"gradio.FileData"}}`,
		`{"path":"/etc/passwd"}`,
		`{"path":"file:///etc/passwd","meta":{"_type":"gradio.FileData"}}`,
		`{"url":"file:///etc/passwd","path":"x","meta":{"_type":"gradio.FileData"}}`,
		`"/etc/passwd"`,
		`"@/etc/passwd"`,
	} {
		a := do(t, "POST", srv.URL+"/v1/predict/reverse_file", `{"data":[`+arg+`]}`)
		if a.status == 200 || strings.Contains(a.body, "root:") || strings.Contains(a.body, "dwssap") {
			t.Errorf("%s: %d %.300s", arg, a.status, a.body)
		}
	}
	if n := sims[0].Requests("upload"); n != 0 {
		t.Errorf("the gateway uploaded %d files", n)
	}
}

// Security (issue 16): no secret and no e-mail in any log line (debug
// level included), error answer, stats or metric, over a real pool with a
// private replica, failing calls included.
func TestNoSecretAnywhere(t *testing.T) {
	const (
		hfToken = "hf_tok_never_shown_123"
		apiKey  = "key_never_shown_456"
		admin   = "admin_never_shown_789"
		email   = "Carol.Secret@Example.org"
	)
	sim := gradiotest.NewUnstartedServer(nil)
	sim.DefaultConcurrencyLimit = -1
	sim.HFToken = hfToken
	sim.Start()
	defer sim.Close()
	var logs logbuf.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := gateway.Config{
		Pool:    pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 2},
		Secrets: gateway.Secrets{HFToken: hfToken, APIKeys: []string{apiKey}, AdminToken: admin, HashKey: "hk"},
	}
	g, err := gateway.Open(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serveFake(t, g)
	defer func() {
		stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	}()
	var out strings.Builder
	call := func(method, path, body, auth string, hdr ...string) {
		a := do(t, method, addr+path, body, append([]string{"Authorization", "Bearer " + auth}, hdr...)...)
		out.WriteString(a.body)
		for k, v := range a.header {
			out.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
	}
	call("POST", "/v1/predict/upper", `{"data":["x"]}`, apiKey, gateway.UserHeader, email)
	// (The call's own data is the app's business: an app error that echoes
	// an input is logged as the app wrote it. Only the caller's identity is
	// checked here.)
	call("POST", "/v1/predict/fail", `{"data":["input"]}`, apiKey, gateway.UserHeader, email)
	call("POST", "/v1/predict/nope", `{"data":[]}`, apiKey, gateway.UserHeader, email)
	call("POST", "/v1/submit/count", `{"data":[2]}`, apiKey, gateway.UserHeader, strings.ToUpper(email))
	call("POST", "/v1/predict/upper", `{"data":["x"]}`, apiKey+"x", gateway.UserHeader, email)
	call("POST", "/v1/predict/upper", `{"data":["x"]}`, apiKey, gateway.UserHeader, email+" bad", gateway.TimeoutHeader, "1e300")
	call("POST", "/gradio_api/call/upper", `{"data":["x"]}`, apiKey, gateway.UserHeader, email)
	call("GET", "/api/admin/pool-stats", "", admin)
	call("GET", "/metrics", "", admin)
	call("GET", "/api/admin/pool-stats", "", hfToken)
	all := logs.String() + out.String()
	for _, s := range []string{hfToken, apiKey, admin, email, strings.ToLower(email), "Carol.Secret", "carol.secret"} {
		if strings.Contains(all, s) {
			i := strings.Index(all, s)
			t.Errorf("%q appears: ...%s...", s, all[max(0, i-150):min(len(all), i+50)])
		}
	}
	if !strings.Contains(logs.String(), `"level":"DEBUG"`) {
		t.Error("no debug line was logged: the test would not see them")
	}
}

// Security (issue 16): a panic in a handler answers a JSON 500 and logs
// the stack, never the panic's value (it may hold call data).
func TestPanicIsAnsweredNotLeaked(t *testing.T) {
	_, srv, logs := newGateway(t, newFake(), nil)
	a := do(t, "POST", srv.URL+"/v1/predict/panic", `{"data":[]}`, gateway.UserHeader, "dave.secret@example.com")
	if a.status != 500 || errorCode(t, a.body) != "internal" {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if l := logs.String(); !strings.Contains(l, "handler panic") || strings.Contains(l, "dave.secret") || strings.Contains(a.body, "dave.secret") {
		t.Fatalf("logs %s", l)
	}
}
