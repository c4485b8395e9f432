package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// frontGatewayApps is frontGateway with one simulated replica per app (nil:
// the default app) and the gateway's logs (JSON) in the returned buffer.
func frontGatewayApps(t *testing.T, apps []*gradiotest.App, mod func(*gateway.Config)) (*httptest.Server, *gateway.Gateway, []*gradiotest.Server, *pool.Pool, *logbuf.Buffer) {
	t.Helper()
	sims, urls := fdtest.Replicas(t, apps, nil)
	cfg := gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 1, MaxConnections: 8}}
	if mod != nil {
		mod(&cfg)
	}
	logs, logger := fdtest.JSONLogs()
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
	odd := fdtest.ReplicaName(sims[1])

	fn := fdtest.FnIndex(t, srv.URL, "upper")
	const calls = 9
	for i := range calls {
		if got, want := fdtest.Call(t, srv.URL, fmt.Sprintf("mm%d", i), fn, fmt.Sprintf("x%d", i)), fmt.Sprintf("X%d", i); got != want {
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
	if len(st.Mismatched) != 1 || !strings.Contains(st.Mismatched[odd], "serves a different app than replica "+fdtest.ReplicaName(sims[0])) ||
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
		`gradiopool_frontdoor_replica_config_mismatch{replica="` + fdtest.ReplicaName(sims[0]) + `"} 0`,
		`gradiopool_frontdoor_replica_config_mismatch{replica="` + fdtest.ReplicaName(sims[2]) + `"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
