package pool_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/logbuf"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// TestAppRestart: a health check that sees a new app_id reconnects the
// replica once and replaces its sessions; calls keep working.
func TestAppRestart(t *testing.T) {
	srvs := replicas(t, 1)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), MinConnections: 2, HealthCheckInterval: 20 * time.Millisecond, OnEvent: rec.hook})
	ctx := ctxT(t)
	if _, err := p.Predict(ctx, "", "upper", "x"); err != nil {
		t.Fatal(err)
	}
	connects := rec.count(pool.EventConnected, "")
	srvs[0].Restart()
	deadline := time.Now().Add(10 * time.Second)
	for rec.count(pool.EventAppChanged, "") == 0 || rec.count(pool.EventConnected, "") == connects {
		if time.Now().After(deadline) {
			t.Fatalf("restart not detected: %d app_changed, %d connects", rec.count(pool.EventAppChanged, ""), rec.count(pool.EventConnected, ""))
		}
		if _, err := p.Predict(ctx, "", "upper", "x"); err != nil {
			t.Fatalf("call during restart handling: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := p.Predict(ctx, "", "upper", "after")
	if err != nil || str(t, res.Data[0]) != "AFTER" {
		t.Fatalf("after restart: %v %v", res, err)
	}
	if n := rec.count(pool.EventConnected, ""); n > connects+2 {
		t.Errorf("%d reconnects for one restart", n-connects)
	}
}

func TestMarkBroken(t *testing.T) {
	srvs := replicas(t, 1)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	ctx := ctxT(t)
	l, err := p.Acquire(ctx, "a@example.com")
	if err != nil {
		t.Fatal(err)
	}
	hash := l.Client().SessionHash()
	l.MarkBroken()
	l.Release() // no effect after MarkBroken
	l.MarkBroken()
	l2, err := p.Acquire(ctx, "a@example.com")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release()
	if l2.Client().SessionHash() == hash {
		t.Error("a broken session was lent again")
	}
	if n := p.Stats(t.Context()).Pools[pool.LeaseReplica(l2)].SessionsDestroyed; n != 1 {
		t.Errorf("%d sessions destroyed, want 1", n)
	}
}

func TestLogsHideEmails(t *testing.T) {
	srvs := replicas(t, 2)
	var buf logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newPool(t, pool.Config{Replicas: append([]string{blackholeURL(t)}, urls(srvs)...), Logger: logger,
		HashKey: []byte("test-key"), ClientOptions: []gradio.Option{gradio.WithHeaderTimeout(400 * time.Millisecond)}})
	ctx := ctxT(t)
	for _, u := range []string{"Secret.User@Example.com", "other.person@example.com", ""} {
		if _, err := p.Predict(ctx, u, "upper", "x"); err != nil {
			t.Fatal(err)
		}
	}
	logs := buf.String()
	if strings.Contains(strings.ToLower(logs), "secret.user") || strings.Contains(logs, "other.person") {
		t.Errorf("logs contain an e-mail:\n%s", logs)
	}
	for _, want := range []string{"pool: initialized", "pool: connected", "pool: connect_failed", "pool: ejected",
		"pool: failover", "pool: assigned", "pool: session_created", "user="} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q", want)
		}
	}
}

func TestAcquireFunc(t *testing.T) {
	srvs := replicas(t, 1)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	ctx := ctxT(t)
	var got string
	err := pool.AcquireFunc(ctx, p, "a@example.com", func(c *gradio.Client) error {
		out, err := c.Predict(ctx, "upper", "in func")
		if err == nil {
			got = str(t, out[0])
		}
		return err
	})
	if err != nil || got != "IN FUNC" {
		t.Fatalf("AcquireFunc: %q %v", got, err)
	}
	if st := p.Stats(t.Context()); st.InUseConnections != 0 {
		t.Errorf("session not released: %+v", st)
	}
}
