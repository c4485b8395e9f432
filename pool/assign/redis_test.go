package assign_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool/assign"
	"github.com/gradiopool/gradiopool/pool/assign/assigntest"
)

// TestRedisConformance runs the Store suite against the Redis store: on the
// server at GRADIOPOOL_REDIS_ADDR when set (host:port; the test uses its own
// key prefix), else on one of its own (a real redis-server when installed,
// as in CI, else miniredis; see internal/redistest).
func TestRedisConformance(t *testing.T) {
	addr := os.Getenv("GRADIOPOOL_REDIS_ADDR")
	if addr == "" {
		addr = redistest.Start(t)
	}
	n := 0
	assigntest.Run(t, func(t *testing.T) assign.Store {
		n++
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s, err := assign.NewRedis(assign.RedisConfig{Client: c, Prefix: fmt.Sprintf("{gradiopool-test-%d-%d}:", os.Getpid(), n)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, assigntest.Options{TTL: 600 * time.Millisecond})
}

func TestNewRedisNeedsClient(t *testing.T) {
	if _, err := assign.NewRedis(assign.RedisConfig{}); err == nil {
		t.Error("NewRedis without a client succeeded")
	}
}
