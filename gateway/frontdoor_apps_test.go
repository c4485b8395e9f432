package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// frontGatewayApps is frontGateway with one simulated replica per app (nil:
// the default app) and the gateway's logs (JSON) in the returned buffer.
func frontGatewayApps(t *testing.T, apps []*gradiotest.App, mod func(*gateway.Config)) (*httptest.Server, *gateway.Gateway, []*gradiotest.Server, *pool.Pool, *logbuf.Buffer) {
	t.Helper()
	var sims []*gradiotest.Server
	var urls []string
	for _, app := range apps {
		s := gradiotest.NewUnstartedServer(app)
		s.StepDelay = 5 * time.Millisecond
		s.Start()
		t.Cleanup(s.Close)
		sims = append(sims, s)
		urls = append(urls, s.URL)
	}
	cfg := gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 1, MaxConnections: 8}}
	if mod != nil {
		mod(&cfg)
	}
	logs := &logbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(logger, metrics))
	if err != nil {
		t.Fatal(err)
	}
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, logger, metrics)
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
		_ = p.Close(context.Background())
	})
	return srv, g, sims, p, logs
}

// replicaName is the pool's name of a simulated replica (its host:port).
func replicaName(s *gradiotest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// fnIndexOf reads the front door's /config and returns the fn_index of
// api_name.
func fnIndexOf(t testing.TB, base, apiName string) int {
	t.Helper()
	resp, err := http.Get(base + "/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /config: %d %s", resp.StatusCode, b)
	}
	cfg, err := gradio.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range cfg.Dependencies {
		if d.APIName == apiName {
			return d.FnIndex
		}
	}
	t.Fatalf("no endpoint %s in the front door's config", apiName)
	return -1
}

// fdJoin posts one queue/join through the front door and returns the
// event id.
func fdJoin(base, session string, fn int, data ...any) (string, error) {
	body, _ := json.Marshal(map[string]any{"data": data, "fn_index": fn, "session_hash": session, "event_data": nil, "trigger_id": nil})
	resp, err := http.Post(base+"/gradio_api/queue/join", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct {
		EventID string `json:"event_id"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil || v.EventID == "" {
		return "", fmt.Errorf("join: %d %s", resp.StatusCode, b)
	}
	return v.EventID, nil
}

// fdStream reads one queue/data stream of session through the front door
// until close_stream (or its end) and returns the process_completed
// messages by event id.
func fdStream(base, session string) (map[string]map[string]any, error) {
	resp, err := http.Get(base + "/gradio_api/queue/data?session_hash=" + session)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	done := map[string]map[string]any{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(d), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "process_completed":
			if id, ok := m["event_id"].(string); ok {
				done[id] = m
			}
		case "close_stream":
			return done, nil
		}
	}
	return done, sc.Err()
}

// fdCall is one whole call through the front door: join, then the stream
// until its process_completed; it returns the first output.
func fdCall(t *testing.T, base, session string, fn int, data ...any) string {
	t.Helper()
	out, err := fdCallE(base, session, fn, data...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fdCallE is fdCall for goroutines other than the test's.
func fdCallE(base, session string, fn int, data ...any) (string, error) {
	id, err := fdJoin(base, session, fn, data...)
	if err != nil {
		return "", err
	}
	done, err := fdStream(base, session)
	if err != nil {
		return "", err
	}
	m := done[id]
	if m == nil || m["success"] != true {
		return "", fmt.Errorf("call %s of session %s: %v", id, session, m)
	}
	out, _ := m["output"].(map[string]any)
	data0, _ := out["data"].([]any)
	if len(data0) == 0 {
		return "", fmt.Errorf("call %s: no outputs: %v", id, m)
	}
	return fmt.Sprint(data0[0]), nil
}

// TestFrontDoorRefusesReplicaWithAnotherApp: behind one gateway, a replica
// serving another app (its /upper takes a number) is reported per replica
// (log, stats, metric) and gets no front-door session, while replicas of
// the reference app — with their own app_id and root — serve every call.
func TestFrontDoorRefusesReplicaWithAnotherApp(t *testing.T) {
	other := gradiotest.NewApp()
	other.Handle("upper", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
		n, err := c.Float(0)
		return []any{fmt.Sprint(n * 2)}, err
	}, []gradiotest.Component{gradiotest.Number("n")}, []gradiotest.Component{gradiotest.Textbox("out")})
	srv, g, sims, _, logs := frontGatewayApps(t, []*gradiotest.App{nil, other, nil}, nil)
	odd := replicaName(sims[1])

	fn := fnIndexOf(t, srv.URL, "upper")
	const calls = 9
	for i := range calls {
		if got, want := fdCall(t, srv.URL, fmt.Sprintf("mm%d", i), fn, fmt.Sprintf("x%d", i)), fmt.Sprintf("X%d", i); got != want {
			t.Errorf("call %d: %q, want %q", i, got, want)
		}
	}
	if n := sims[1].Executions("upper"); n != 0 {
		t.Errorf("the replica with another app ran %d calls, want 0", n)
	}
	if a, c := sims[0].Executions("upper"), sims[2].Executions("upper"); a+c != calls || a == 0 || c == 0 {
		t.Errorf("the two replicas of the reference app ran %d and %d calls, want %d spread over both", a, c, calls)
	}

	// The background check of every replica reports the odd one even if no
	// session had tried it; bounded wait.
	var st struct{ Mismatched map[string]string }
	for range 400 {
		s := g.FrontDoor().Stats()
		st.Mismatched = s.Mismatched
		if _, ok := st.Mismatched[odd]; ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(st.Mismatched) != 1 || !strings.Contains(st.Mismatched[odd], "serves a different app than replica "+replicaName(sims[0])) ||
		!strings.Contains(st.Mismatched[odd], "[number]") {
		t.Errorf("stats name %v as mismatching, want only %s with the differing inputs", st.Mismatched, odd)
	}
	var errLines int
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, "serves a different app") {
			errLines++
			if !strings.Contains(line, `"replica":"`+odd+`"`) || !strings.Contains(line, `"diff":"- fn_index`) {
				t.Errorf("the error line does not name the replica and the difference: %s", line)
			}
		}
	}
	if errLines != 1 {
		t.Errorf("%d error lines about the mismatch, want exactly 1:\n%s", errLines, logs.String())
	}
	resp, err := http.Get(srv.URL + "/api/admin/pool-stats")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		FrontDoor struct {
			ConfigMismatch map[string]string `json:"configMismatch"`
		} `json:"frontDoor"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || len(doc.FrontDoor.ConfigMismatch) != 1 || doc.FrontDoor.ConfigMismatch[odd] == "" {
		t.Errorf("pool-stats frontDoor.configMismatch = %v (%v), want %s", doc.FrontDoor.ConfigMismatch, err, odd)
	}
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`gradiopool_frontdoor_replica_config_mismatch{replica="` + odd + `"} 1`,
		`gradiopool_frontdoor_replica_config_mismatch{replica="` + replicaName(sims[0]) + `"} 0`,
		`gradiopool_frontdoor_replica_config_mismatch{replica="` + replicaName(sims[2]) + `"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
