package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrRedisDown is returned by Acquire while Redis is lost and
// Config.OnRedisLoss is FailClosed.
var ErrRedisDown = errors.New("cluster: redis is lost and on_redis_loss is fail_closed: no new calls until it answers")

// MisconfiguredError is a Redis that answers but refuses what the cluster
// needs (a wrong topology, a missing ACL permission): New fails with it,
// since running on would ignore the global limit. Fix says what to change.
type MisconfiguredError struct {
	Op  string // what was refused, e.g. "the acquire script"
	Fix string // what to change, in the operator's terms
	Err error  // Redis' answer
}

func (e *MisconfiguredError) Error() string {
	return fmt.Sprintf("cluster: redis refused %s (%v): %s", e.Op, e.Err, e.Fix)
}

func (e *MisconfiguredError) Unwrap() error { return e.Err }

// aclCommands are the commands a gateway sends, in its scripts too (Redis
// checks a script's commands against the caller's ACL as it runs them);
// the hash and list commands are the replica controls' and the autoscale
// policy's (package autoscale's RedisShared).
// cluster|slots and cluster|shards are what a Cluster client reads the
// slot map with; hello and select what go-redis sends when
// it connects.
// checkWaitTimeout bounds the start-up check's WAIT for the replicas'
// acknowledgement (the calls' own WAIT is bounded by the operation time-out).
const checkWaitTimeout = 2 * time.Second

const aclCommands = "+ping +hello +select +cluster|slots +cluster|shards +readonly " +
	"+evalsha +eval +subscribe +unsubscribe +publish +multi +exec " +
	"+get +set +del +mget +incr +pexpire +time " +
	"+zadd +zrem +zcard +zcount +zscore +zrange +zrangebyscore +zremrangebyscore " +
	"+hset +hdel +hgetall +rpush +ltrim +lrange"

// ACLRule is the least a Redis 6+ ACL user needs for the cluster named
// name (Config.Name; "" is DefaultName): its keys, its pub/sub channels
// and the commands above. Create the user with
//
//	ACL SETUSER gradiopool on >PASSWORD <ACLRule(name)>
func ACLRule(name string) string {
	if name == "" {
		name = DefaultName
	}
	return "resetkeys ~{" + name + "}:* resetchannels &{" + name + "}:* -@all " + aclCommands
}

// misconfigured classifies err of op: a *MisconfiguredError when Redis
// refused it for a reason an operator must fix, else err (unreachable,
// slow: the outage handling deals with those).
func (c *Coordinator) misconfigured(op string, err error) error {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return err
	}
	msg := rerr.Error()
	fix := ""
	switch {
	case strings.Contains(msg, "MOVED") || strings.Contains(msg, "ASK "):
		fix = "this node is part of a Redis Cluster and does not own the keys' hash slot: give every seed node in the Redis URL " +
			"(redis://node1:6379?addr=node2:6379&addr=node3:6379, or ?cluster=true with one node)"
	case strings.Contains(msg, "READONLY"):
		fix = "this is a read-only replica: point the Redis URL at the primary, or at the Sentinels " +
			"(redis://sentinel1:26379?master_name=NAME&addr=sentinel2:26379)"
	case strings.Contains(msg, "unknown command"):
		fix = "this server does not run these commands (a Sentinel?): for Sentinel give its master name and addresses " +
			"(redis://sentinel1:26379?master_name=NAME&addr=sentinel2:26379); Redis 7.0 or later is needed"
	case strings.Contains(msg, "cluster support disabled"):
		fix = "the Redis URL asks for a Cluster but this server is standalone: drop cluster=true and addr= from the URL"
	case denied(msg) && strings.Contains(strings.ToLower(msg), "channel"):
		fix = fmt.Sprintf("the ACL user may not use the pub/sub channels {%s}:* (Redis 7 gives new users none): "+
			"ACL SETUSER <user> &{%s}:*, or the whole rule: ACL SETUSER <user> on >PASSWORD %s", c.cfg.Name, c.cfg.Name, ACLRule(c.cfg.Name))
	case denied(msg):
		fix = "the ACL user lacks a permission: ACL SETUSER <user> on >PASSWORD " + ACLRule(c.cfg.Name)
	case strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS"):
		fix = "authentication failed: check the user and password in GRADIOPOOL_REDIS_URL"
	case strings.Contains(msg, "NOSCRIPT") || strings.Contains(msg, "LOADING") || strings.Contains(msg, "TRYAGAIN") ||
		strings.Contains(msg, "CLUSTERDOWN") || strings.Contains(msg, "MASTERDOWN"):
		return err // transient: the outage handling retries
	default:
		fix = "Redis 7.0 or later, standalone, Sentinel or Cluster, is needed"
	}
	return &MisconfiguredError{Op: op, Fix: fix, Err: err}
}

// denied reports whether msg is an ACL refusal: NOPERM, or the words a
// script's refused command gets.
func denied(msg string) bool {
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "can't run this command") ||
		strings.Contains(msg, "no permissions") || strings.Contains(msg, "can't access")
}

// checkScript runs every command the gateway's scripts and stores use, on
// scratch keys, so that an ACL that refuses one of them (Redis checks them
// only when a script runs them, some only under contention) is found at
// start, not as a silent fallback later.
//
// KEYS: a scratch sorted set, a scratch string. ARGV: channel.
var checkScript = redis.NewScript(scriptNow + `
redis.call('ZADD', KEYS[1], now, 'x')
redis.call('ZSCORE', KEYS[1], 'x')
redis.call('ZCARD', KEYS[1])
redis.call('ZCOUNT', KEYS[1], '-inf', '+inf')
redis.call('ZRANGE', KEYS[1], 0, -1)
redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '-inf')
redis.call('ZREM', KEYS[1], 'x')
redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[2], '1', 'PX', 10000)
redis.call('GET', KEYS[2])
redis.call('PEXPIRE', KEYS[2], 10000)
redis.call('PUBLISH', ARGV[1], 'c|')
redis.call('DEL', KEYS[1], KEYS[2])
return 1
`)

// probe runs each script once with harmless arguments on scratch keys, the
// commands the stores send outside scripts, and a PUBLISH that must come
// back through this gateway's subscription: the start-up check. Errors
// are classified by misconfigured.
func (c *Coordinator) probe(ctx context.Context) error {
	var b [6]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	base := c.prefix + "check:" + c.id + ":" + nonce + ":"
	keys := []string{base + "h", base + "q", base + "qx", base + "r", base + "seq"}
	if err := checkScript.Run(ctx, c.rdb, []string{base + "z", base + "s"}, c.channel()).Err(); err != nil {
		return c.misconfigured("the check script", err)
	}
	runs := []struct {
		op  string
		run func() error
	}{
		{"the acquire script", func() error {
			// The check waits longer for the replicas than a call does:
			// one slow acknowledgement on a loaded host is not a Redis
			// without replicas, and refusing the start is final.
			waitFor := checkWaitTimeout
			if d, ok := ctx.Deadline(); ok {
				waitFor = min(waitFor, time.Until(d)*3/4)
			}
			_, err := c.runAcquire(ctx, append(keys, c.prefix+"gw"), []any{c.id, c.id + ":", 0, 0, 1, 1000, c.channel(), "check", 1000, 0}, waitFor)
			if errors.Is(err, errNotReplicated) {
				return &MisconfiguredError{Op: "WAIT", Err: err, Fix: fmt.Sprintf(
					"fewer than %d replicas acknowledged a write of the primary within %v: give it a replica, or set cluster.redis_wait_replicas: 0 "+
						"(then a failover may lose grants and exceed the limit)", c.cfg.WaitReplicas, waitFor.Round(time.Millisecond))}
			}
			return err
		}},
		{"the release script", func() error {
			return releaseScript.Run(ctx, c.rdb, keys[:2], c.channel(), "check").Err()
		}},
		{"the leave script", func() error {
			return leaveScript.Run(ctx, c.rdb, keys[1:3], c.id, c.channel(), "check").Err()
		}},
		{"the sync script", func() error {
			return syncScript.Run(ctx, c.rdb, []string{keys[0], keys[3], c.prefix + "gw", keys[1], keys[2]}, c.id, 1000, "0", 0).Err()
		}},
		{"a transaction (the assignment store)", func() error {
			_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.SetArgs(ctx, base+"s", "1", redis.SetArgs{Mode: "NX", Get: true, TTL: 10 * time.Second})
				p.Get(ctx, base+"s")
				p.MGet(ctx, base+"s")
				p.ZAdd(ctx, base+"z", redis.Z{Score: 1, Member: "x"})
				p.ZCount(ctx, base+"z", "-inf", "+inf")
				p.ZRangeByScore(ctx, base+"z", &redis.ZRangeBy{Min: "-inf", Max: "+inf"})
				p.Del(ctx, base+"s", base+"z")
				return nil
			})
			if errors.Is(err, redis.Nil) {
				err = nil // SET NX GET of a new key answers nil
			}
			return err
		}},
	}
	for _, r := range runs {
		var mis *MisconfiguredError
		if err := r.run(); errors.As(err, &mis) {
			return err
		} else if err != nil {
			return c.misconfigured(r.op, err)
		}
	}
	return c.pubsubRoundTrip(ctx, nonce)
}

// pubsubRoundTrip PUBLISHes "p|nonce" on the cluster's channel and waits
// until this gateway's subscription delivers it.
func (c *Coordinator) pubsubRoundTrip(ctx context.Context, nonce string) error {
	got := make(chan struct{})
	c.mu.Lock()
	c.pongs[nonce] = got
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pongs, nonce)
		c.mu.Unlock()
	}()
	if err := c.rdb.Publish(ctx, c.channel(), "p|"+nonce).Err(); err != nil {
		return c.misconfigured("PUBLISH on "+c.channel(), err)
	}
	select {
	case <-got:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cluster: a PUBLISH on %s did not come back through the subscription: %w", c.channel(), ctx.Err())
	}
}

// pong delivers a round trip's notice.
func (c *Coordinator) pong(nonce string) {
	c.mu.Lock()
	ch := c.pongs[nonce]
	delete(c.pongs, nonce)
	c.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}
