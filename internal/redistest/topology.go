package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of real redis-server processes on loopback:
// three masters sharing the 16384 slots and one replica of the master that
// owns one hash tag's slot, so that a test can fail that master over.
type Cluster struct {
	Masters []*Server
	Replica *Server // replica of Owner
	Owner   *Server // the master owning the tag's slot (after FailOver, the promoted one)
	t       testing.TB
}

// clusterNodeTimeout is how long a master may be unreachable before its
// replica takes over (cluster-node-timeout): short, for bounded tests.
const clusterNodeTimeout = "1000"

// StartCluster starts three masters and a replica of the master that owns
// tag's slot (e.g. "{gradiopool}"), and waits until the cluster is up.
func StartCluster(t testing.TB, tag string) *Cluster {
	t.Helper()
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", clusterNodeTimeout, "--cluster-require-full-coverage", "yes"}
	c := &Cluster{t: t}
	for range 3 {
		c.Masters = append(c.Masters, StartServer(t, args...))
	}
	c.Replica = StartServer(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n0 := admin(t, c.Masters[0].Addr)
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, m := range c.Masters {
		a := admin(t, m.Addr)
		must(t, a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err())
	}
	for _, s := range append(c.Masters[1:], c.Replica) {
		must(t, n0.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.port).Err())
	}
	slot, err := n0.Do(ctx, "CLUSTER", "KEYSLOT", tag).Int()
	must(t, err)
	for i, r := range ranges {
		if slot >= r[0] && slot <= r[1] {
			c.Owner = c.Masters[i]
		}
	}
	ownerID, err := admin(t, c.Owner.Addr).Do(ctx, "CLUSTER", "MYID").Text()
	must(t, err)
	rep := admin(t, c.Replica.Addr)
	poll(t, ctx, "the replica to learn the owner", func() bool {
		nodes, _ := rep.Do(ctx, "CLUSTER", "NODES").Text()
		return strings.Contains(nodes, ownerID)
	})
	must(t, rep.Do(ctx, "CLUSTER", "REPLICATE", ownerID).Err())
	poll(t, ctx, "the replica's link", func() bool {
		info, _ := rep.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	c.WaitOK(ctx)
	return c
}

// Seeds are the masters' addresses.
func (c *Cluster) Seeds() []string {
	var out []string
	for _, m := range c.Masters {
		out = append(out, m.Addr)
	}
	return out
}

// NotOwner is a master that does not own the tag's slot.
func (c *Cluster) NotOwner() *Server {
	for _, m := range c.Masters {
		if m != c.Owner {
			return m
		}
	}
	return nil
}

// WaitOK waits until every running node reports cluster_state:ok and
// agrees on the nodes.
func (c *Cluster) WaitOK(ctx context.Context) {
	c.t.Helper()
	for _, s := range append(c.Masters, c.Replica) {
		if !s.Running() {
			continue
		}
		a := admin(c.t, s.Addr)
		poll(c.t, ctx, "cluster_state:ok on "+s.Addr, func() bool {
			info, _ := a.Do(ctx, "CLUSTER", "INFO").Text()
			return strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:4")
		})
	}
}

// FailOver kills the owner of the tag's slot and waits until its replica
// has taken over as master (cluster-node-timeout, then an election) and
// the cluster is ok again; then it starts the killed node again, as an
// operator or an orchestrator would, and waits until it has rejoined as
// the new master's replica (its nodes.conf names the cluster), so that
// writes are acknowledged by a replica again (cluster.redis_wait_replicas).
// Owner and Replica are swapped to match.
func (c *Cluster) FailOver(ctx context.Context) {
	c.t.Helper()
	c.Owner.Stop()
	rep := admin(c.t, c.Replica.Addr)
	poll(c.t, ctx, "the replica to become master", func() bool {
		role, _ := rep.Do(ctx, "ROLE").Slice()
		return len(role) > 0 && role[0] == "master"
	})
	for _, s := range c.Masters {
		if s == c.Owner {
			continue
		}
		a := admin(c.t, s.Addr)
		poll(c.t, ctx, "cluster_state:ok after the failover on "+s.Addr, func() bool {
			info, _ := a.Do(ctx, "CLUSTER", "INFO").Text()
			return strings.Contains(info, "cluster_state:ok")
		})
	}
	c.Owner.Start()
	back := admin(c.t, c.Owner.Addr)
	poll(c.t, ctx, "the killed node to rejoin as a replica", func() bool {
		info, _ := back.Do(ctx, "INFO", "replication").Text()
		return strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	for i, m := range c.Masters {
		if m == c.Owner {
			c.Masters[i] = c.Replica
		}
	}
	c.Owner, c.Replica = c.Replica, c.Owner
}

// Sentinels is a primary, its replica and three Sentinels watching them
// as master Name, on loopback.
type Sentinels struct {
	Name      string
	Primary   *Server
	Replica   *Server
	Sentinels []*Server
	t         testing.TB
}

// StartSentinels starts a primary, a replica and three Sentinels (quorum 2,
// down after 500 ms) and waits until the Sentinels know the replica.
func StartSentinels(t testing.TB, name string) *Sentinels {
	t.Helper()
	s := &Sentinels{Name: name, t: t}
	s.Primary = StartServer(t)
	s.Replica = StartServer(t, "--replicaof", "127.0.0.1", s.Primary.port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep := admin(t, s.Replica.Addr)
	poll(t, ctx, "the replica's link", func() bool {
		info, _ := rep.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	for range 3 {
		conf := filepath.Join(t.TempDir(), "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s 2\nsentinel down-after-milliseconds %[1]s 500\n"+
			"sentinel failover-timeout %[1]s 5000\nsentinel parallel-syncs %[1]s 1\n", name, s.Primary.port)
		must(t, os.WriteFile(conf, []byte(body), 0o600))
		s.Sentinels = append(s.Sentinels, StartSentinel(t, conf))
	}
	for _, sn := range s.Sentinels {
		a := admin(t, sn.Addr)
		poll(t, ctx, "the Sentinel to know the replica and the others", func() bool {
			reps, _ := a.Do(ctx, "SENTINEL", "REPLICAS", name).Slice()
			sents, _ := a.Do(ctx, "SENTINEL", "SENTINELS", name).Slice()
			return len(reps) == 1 && len(sents) == 2
		})
	}
	return s
}

// Addrs are the Sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	var out []string
	for _, sn := range s.Sentinels {
		out = append(out, sn.Addr)
	}
	return out
}

// FailOver asks the Sentinels for a failover (SENTINEL FAILOVER, the
// graceful kind an operator runs) and waits until they name the replica
// as the master.
func (s *Sentinels) FailOver(ctx context.Context) {
	s.t.Helper()
	a := admin(s.t, s.Sentinels[0].Addr)
	must(s.t, a.Do(ctx, "SENTINEL", "FAILOVER", s.Name).Err())
	for _, sn := range s.Sentinels {
		a := admin(s.t, sn.Addr)
		poll(s.t, ctx, "the Sentinels to name the new master", func() bool {
			addr, _ := a.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name).StringSlice()
			return len(addr) == 2 && addr[1] == s.Replica.port
		})
	}
}

// Running reports whether the server runs (not stopped).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Port is the server's port.
func (s *Server) Port() int {
	p, _ := strconv.Atoi(s.port)
	return p
}

func admin(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// poll waits for cond, checked every 20 ms, until ctx ends.
func poll(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
