package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// newCoordinator starts a Coordinator on rdb with cfg's other fields.
func newCoordinator(t *testing.T, rdb redis.UniversalClient, cfg cluster.Config) (*cluster.Coordinator, error) {
	t.Helper()
	cfg.Client = rdb
	if cfg.Name == "" {
		cfg.Name = "fs"
	}
	if cfg.Replicas == nil {
		cfg.Replicas = []string{replica}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(&debugLog, nil))
	}
	c, err := cluster.New(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			c.Close(ctx)
		})
	}
	return c, err
}

// wantMisconfigured checks that err refuses the start and names fix.
func wantMisconfigured(t *testing.T, err error, fix string) {
	t.Helper()
	var mis *cluster.MisconfiguredError
	if !errors.As(err, &mis) {
		t.Fatalf("New: %v, want a *MisconfiguredError", err)
	}
	if !strings.Contains(err.Error(), fix) {
		t.Errorf("New: %v\nwant the message to say %q", err, fix)
	}
}

// TestStartRefusesMisconfiguredRedis: a Redis that answers PING but
// refuses what the cluster needs refuses the start, saying what to fix,
// instead of serving on a local share that is the whole limit.
func TestStartRefusesMisconfiguredRedis(t *testing.T) {
	primary := redistest.StartServer(t)
	admin := newClient(t, primary.Addr)
	ctx := context.Background()

	t.Run("ACL user without channels", func(t *testing.T) {
		// Redis 7's default for a new user: every command but the
		// dangerous ones, the deployment's keys, no channel.
		if err := admin.Do(ctx, "ACL", "SETUSER", "nochan", "on", ">pw", "~{fs}:*", "+@all", "-@dangerous").Err(); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, Username: "nochan", Password: "pw", DisableIdentity: true})
		defer rdb.Close()
		_, err := newCoordinator(t, rdb, cluster.Config{Limit: 2})
		wantMisconfigured(t, err, "&{fs}:*")
	})

	t.Run("ACL user without a script's command", func(t *testing.T) {
		rule := strings.Fields(strings.Replace(cluster.ACLRule("fs"), " +incr", "", 1))
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "noincr", "on", ">pw"}, toAny(rule)...)...).Err(); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, Username: "noincr", Password: "pw", DisableIdentity: true})
		defer rdb.Close()
		_, err := newCoordinator(t, rdb, cluster.Config{Limit: 2})
		wantMisconfigured(t, err, cluster.ACLRule("fs"))
	})

	t.Run("ACL user with the documented rule", func(t *testing.T) {
		rule := strings.Fields(cluster.ACLRule("fs"))
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "gp", "on", ">pw"}, toAny(rule)...)...).Err(); err != nil {
			t.Fatal(err)
		}
		f := newInflight()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var errs atomic.Int64
		var gws []*cluster.Coordinator
		for i := range 3 {
			rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, Username: "gp", Password: "pw", ContextTimeoutEnabled: true})
			defer rdb.Close()
			id := fmt.Sprintf("acl%d", i)
			c, err := newCoordinator(t, rdb, cluster.Config{Limit: 2, LeaseTTL: time.Second, GatewayID: id})
			if err != nil {
				t.Fatal(err)
			}
			gws = append(gws, c)
			load(c, id, 4, time.Millisecond, f, stop, &errs, &wg)
		}
		// Contention makes the scripts PUBLISH: refused, it would flap
		// the gateways to local mode.
		waitUntil(t, "300 grants", func() bool { _, _, _, n := f.snapshot(); return n >= 300 })
		close(stop)
		wg.Wait()
		for i, c := range gws {
			if !c.RedisUp() {
				t.Errorf("gateway %d fell back to local mode under the documented ACL rule\n%s", i, debugLog.b)
			}
		}
		if peak, _, _, _ := f.snapshot(); peak > 2 {
			t.Errorf("%d calls at once, limit 2", peak)
		}
		if errs.Load() > 0 {
			t.Errorf("%d acquires failed", errs.Load())
		}
	})

	t.Run("read-only replica", func(t *testing.T) {
		_, port, _ := strings.Cut(primary.Addr, ":")
		rep := redistest.StartServer(t, "--replicaof", "127.0.0.1", port)
		_, err := newCoordinator(t, newClient(t, rep.Addr), cluster.Config{Limit: 2})
		wantMisconfigured(t, err, "read-only replica")
	})

	t.Run("Sentinel", func(t *testing.T) {
		s := startSentinel(t, "mymaster", primary.Addr)
		_, err := newCoordinator(t, newClient(t, s.Addr), cluster.Config{Limit: 2})
		wantMisconfigured(t, err, "master_name=")
	})
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// startSentinel starts a Sentinel watching the primary at addr as name.
func startSentinel(t *testing.T, name, addr string) *redistest.Server {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %s %s %s 2\nsentinel down-after-milliseconds %s 500\nsentinel failover-timeout %s 3000\n",
		name, host, port, name, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return redistest.StartSentinel(t, conf)
}

// TestStartWithoutRedis: without Redis a gateway refuses to start unless
// told to start degraded; then it serves on its share of the gateways it
// was told may run (fail_open), or refuses calls (fail_closed), and joins
// when Redis answers.
func TestStartWithoutRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Stop()
	if _, err := newCoordinator(t, newClient(t, srv.Addr), cluster.Config{Limit: 6, LeaseTTL: 600 * time.Millisecond}); err == nil {
		t.Fatal("New started without Redis and without StartDegraded")
	}
	if _, err := newCoordinator(t, newClient(t, srv.Addr), cluster.Config{Limit: 6, StartDegraded: true}); err == nil {
		t.Fatal("New started degraded without Gateways: its share would be the whole limit")
	}
	open, err := newCoordinator(t, newClient(t, srv.Addr), cluster.Config{Limit: 6, LeaseTTL: 600 * time.Millisecond,
		StartDegraded: true, Gateways: 3, GatewayID: "open"})
	if err != nil {
		t.Fatal(err)
	}
	closed, err := newCoordinator(t, newClient(t, srv.Addr), cluster.Config{Limit: 6, LeaseTTL: 600 * time.Millisecond,
		StartDegraded: true, Gateways: 3, OnRedisLoss: cluster.FailClosed, GatewayID: "closed"})
	if err != nil {
		t.Fatal(err)
	}
	if open.RedisUp() || closed.RedisUp() {
		t.Fatal("RedisUp true without Redis")
	}
	// fail_open: the share of 3 gateways, 6/3, and not one more.
	var held []func()
	for range 2 {
		p, err := open.Acquire(context.Background(), replica, pool.PriorityNormal)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p.Release)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	if _, err := open.Acquire(ctx, replica, pool.PriorityNormal); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("third acquire over a share of 2: %v, want to wait", err)
	}
	cancel()
	// fail_closed: refused at once.
	if _, err := closed.Acquire(context.Background(), replica, pool.PriorityNormal); !errors.Is(err, cluster.ErrRedisDown) {
		t.Errorf("fail_closed without Redis: %v, want ErrRedisDown", err)
	}
	srv.Start()
	waitUntil(t, "both to join", func() bool { return open.RedisUp() && closed.RedisUp() })
	p, err := closed.Acquire(context.Background(), replica, pool.PriorityNormal)
	if err != nil {
		t.Fatalf("fail_closed after Redis returned: %v", err)
	}
	p.Release()
	for _, r := range held {
		r()
	}
}

// TestShareCountsLastMembership: a gateway that loses Redis right after
// another one joined counts it (the join notice), and never takes more
// than limit / Gateways.
func TestShareCountsLastMembership(t *testing.T) {
	srv := redistest.StartServer(t)
	const limit = 6
	// A long TTL: the first heartbeat after the joins comes 20 s later,
	// so only the join notice can tell g0 about g1.
	cfg := cluster.Config{Limit: limit, LeaseTTL: time.Minute}
	cfg.GatewayID = "g0"
	g0, err := newCoordinator(t, newClient(t, srv.Addr), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := g0.LocalShare(limit); s != limit {
		t.Fatalf("alone: share %d, want %d", s, limit)
	}
	cfg.GatewayID = "g1"
	if _, err := newCoordinator(t, newClient(t, srv.Addr), cfg); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "g0 to count g1", func() bool { return g0.LocalShare(limit) == limit/2 })
	cfg.GatewayID, cfg.Gateways, cfg.Name = "g2", 3, "other"
	g2, err := newCoordinator(t, newClient(t, srv.Addr), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := g2.LocalShare(limit); s != limit/3 {
		t.Errorf("with Gateways 3: share %d, want %d", s, limit/3)
	}
	srv.Stop()
	var held []func()
	for range limit / 2 {
		p, err := g0.Acquire(context.Background(), replica, pool.PriorityNormal)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p.Release)
	}
	if g0.RedisUp() {
		t.Fatal("g0 did not notice the outage")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := g0.Acquire(ctx, replica, pool.PriorityNormal); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("acquire over the share of %d: %v, want to wait", limit/2, err)
	}
	for _, r := range held {
		r()
	}
}

// TestDocsNameACLRule: the ACL rule of docs/cluster.md is the one tested
// above.
func TestDocsNameACLRule(t *testing.T) {
	b, err := os.ReadFile("../../docs/cluster.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "ACL SETUSER gradiopool on >PASSWORD " + cluster.ACLRule("gradiopool"); !strings.Contains(string(b), want) {
		t.Errorf("docs/cluster.md does not give the ACL rule\n%s", want)
	}
}
