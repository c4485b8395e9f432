package cluster_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// TestCheck: Check refuses what New refuses to start on (an ACL user
// without the cluster's channel, an unreachable Redis) and passes the
// documented ACL rule, leaving no key behind and no gateway counted: it
// joins nothing.
func TestCheck(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // registered first: runs last
	primary := redistest.StartServer(t)
	admin := newClient(t, primary.Addr)
	ctx := context.Background()
	user := func(name string, rule ...string) *redis.Client {
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", name, "on", ">pw"}, toAny(rule)...)...).Err(); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, Username: name, Password: "pw", DisableIdentity: true})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}

	err := cluster.Check(ctx, cluster.Config{Client: user("nochan", "~{ck}:*", "+@all", "-@dangerous"), Name: "ck", Limit: 2})
	wantMisconfigured(t, err, "&{ck}:*")

	if err := cluster.Check(ctx, cluster.Config{Client: user("gp", strings.Fields(cluster.ACLRule("ck"))...), Name: "ck", Limit: 2}); err != nil {
		t.Fatalf("the documented ACL rule: %v", err)
	}
	keys, err := admin.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("Check left keys behind: %q", keys)
	}

	dead := redis.NewClient(&redis.Options{Addr: redistest.FreePort(t), DisableIdentity: true, MaxRetries: -1})
	defer dead.Close()
	if err := cluster.Check(ctx, cluster.Config{Client: dead, Name: "ck", Limit: 2}); err == nil || !strings.Contains(err.Error(), "redis unreachable") {
		t.Errorf("an unreachable Redis: %v, want redis unreachable", err)
	}
}
