// Package cluster makes several gateways (several pools of the same
// replicas) behave as one through Redis. Each replica's limit of calls in
// flight holds across all of them, waiting callers are served fairly, user
// assignments and statistics are shared, and a Redis outage degrades to
// local shares instead of stopping the service.
//
//	rdb := redis.NewClient(opts) // go-redis v9; rediss:// URLs give TLS
//	c, err := cluster.New(ctx, cluster.Config{Client: rdb, Limit: 50, LeaseTTL: 15 * time.Second})
//	shared, _ := assign.NewRedis(assign.RedisConfig{Client: rdb, Prefix: "{gradiopool}:assign:"})
//	store := c.Store(shared)
//	p, err := pool.New(pool.Config{Replicas: replicas, MaxConnections: 50, Limiter: c, Store: store, HashKey: key})
//	c.AddReplicas(p.Replicas()...)
//	defer func() { p.Close(ctx); c.Close(ctx); store.Close() }()
//
// # The semaphore
//
// Every call takes a lease on its replica's limit before the pool lends it
// a session ([pool.Limiter]) and gives it back with the session. A lease is
// a member of a sorted set in Redis scored by its expiry; each operation
// (acquire, release, leave the queue, refresh, rejoin, heartbeat) is one
// Lua script, atomic on the server, and every expiry is computed from
// Redis' own TIME, never from a gateway's clock. Leases live LeaseTTL and
// are refreshed every LeaseTTL/3 while their calls run; a gateway that dies
// stops refreshing, so its leases expire (and are reclaimed by the next
// script that looks) within one LeaseTTL.
//
// # Fairness
//
// Within a gateway, callers wait in one list per replica, FIFO within
// pool.CallOptions.Priority classes, served as the session pool serves its own
// (highest class first, a lower one promoted after PriorityMaxWait); one
// goroutine per replica, alive only while callers wait, asks Redis for
// leases on behalf of the oldest. Across gateways, a gateway that cannot
// get all it wants takes a ticket in the replica's Redis queue. A free slot
// may be taken only by a gateway with fewer gateways ahead of it in the
// queue than there are free slots; a gateway served while others wait gets
// at most an even part of the free slots and goes to the back of the queue.
// So waiting gateways are served round robin, and no gateway starves
// however many callers another one has (TestFairAcrossGateways: a gateway
// with 2 callers beside one with 24 gets a third of the grants, and no
// caller waits for more than a dozen grants to others). Releases PUBLISH a
// notice so that waiting gateways try at once; they also poll every
// PollInterval (100 ms) in case a notice is lost.
//
// A waiting gateway's place in a queue lapses unless it asks again within
// ten PollIntervals (1 s), so a dead gateway first in the queue stops
// blocking the others within about a second, leases or not; its leases
// lapse within LeaseTTL.
//
// # Round trips
//
// A gateway keeps the leases its calls free: a freed lease goes straight
// to the next caller waiting in the same gateway, or stays idle (held and
// refreshed in Redis) for PollInterval for the next call, and only then
// goes back to Redis, off the call path. While other gateways wait for
// the replica, a gateway keeps at most an even part of the limit (limit /
// (gateways waiting + 1), possibly 0) and gives back the rest as their
// calls end; a gateway short of its part PUBLISHes a notice each time it
// asks (every PollInterval while it waits) that makes the others give
// back their idle leases beyond their part at once, and every lease
// refresh (LeaseTTL/3) counts the waiting gateways too. So a call of a known user costs at most two
// round trips (the assignment read, which also extends it ([Store],
// assign.Refresher), and the acquire script), and one while the gateway
// is busy. With Config.WaitReplicas the acquire script is pipelined with
// WAIT, so that a grant a failover would lose is never used.
//
// # Checked at start
//
// New subscribes, runs every script once on scratch keys and sends a
// PUBLISH that must come back through its subscription. A Redis that
// answers but refuses one of them (a Cluster node that does not own the
// slot, a read-only replica, a Sentinel, a missing ACL permission) fails
// New with a [*MisconfiguredError] saying what to fix ([ACLRule] is the
// least an ACL user needs); one that does not answer fails it too, unless
// Config.StartDegraded. Build the client with [NewClient] (standalone,
// Sentinel or Cluster, TLS; context time-outs cut socket reads).
//
// # Redis lost
//
// The first failed operation (or one slower than LeaseTTL/3, at most 2 s)
// switches the gateway to local mode, logged once at warn, with
// gradiopool_redis_up 0. With FailOpen the gateway first keeps, until its
// leases may lapse in Redis (LeaseTTL after their last refresh), to as
// many calls as it held leases at the loss, its idle ones included: Redis
// counts those and nothing else for it, and the other gateways may still
// reach Redis. A release on its way at the loss is not counted (Redis may
// have applied it and granted the slot to another gateway). A gateway
// busy on a replica keeps its part of the limit (above), so it holds
// leases Redis acknowledged at any moment and its calls go on through the
// loss without a gap. Then each replica's limit becomes a local share (no
// more than those leases until one LeaseTTL after the loss was noticed,
// when every gateway's own have lapsed too): the
// limit divided by the gateways last seen alive (at the last
// heartbeat, acquire or join notice), and by at least Config.Gateways, at
// least 1; assignments are read from and written to a local copy
// ([Coordinator.Store] keeps one all along). Calls in flight keep running;
// new ones wait for the share. With FailClosed new calls fail with
// ErrRedisDown until Redis answers. Every LeaseTTL/3 the gateway PINGs Redis; when it answers, the
// gateway rejoins: new callers wait while it registers the calls it runs
// (and drops its stale leases), and reserves the local share of every
// gateway it last saw alive that has no heartbeat yet (those still serve on
// their shares); a gateway that rejoins removes its own reservation.
// Reservations lapse after two LeaseTTLs (a gateway that died during the
// outage). So the limit holds while the gateways come back one by one.
//
// Limits of the local mode: entering it, a gateway that held more than its
// share keeps those calls until they end while the others already admit up
// to their shares, so the total may exceed the limit by those excess calls
// until they end; a gateway that held no lease at the loss (idle for
// PollInterval, or its part 0: more gateways waiting than the limit)
// serves nothing until its share, one LeaseTTL later; and a gateway cut
// off from Redis while the others still reach it looks dead to them: once
// its leases expire they use the whole limit while it serves its share.
//
// # Statistics
//
// Every gateway publishes its numbers (leases held, sessions, waiting, per
// replica) with a heartbeat every LeaseTTL/3 that lives LeaseTTL;
// [Coordinator.Stats] sums every live gateway's numbers and the leases
// counted in Redis. [Coordinator.Collector] exports them as
// gradiopool_cluster_* metrics, with gradiopool_redis_up.
package cluster
