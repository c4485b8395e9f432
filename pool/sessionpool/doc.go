// Package sessionpool keeps warm sessions to one replica of an app (for
// gradiopool: connected *gradio.Client sessions to one Gradio Space) so that
// calls reuse them instead of paying a connect each time.
//
//	p, err := sessionpool.New(sessionpool.Config[*gradio.Client]{
//		Connect: func(ctx context.Context) (*gradio.Client, error) {
//			return gradio.Connect(ctx, "owner/space")
//		},
//		Close: func(c *gradio.Client) { c.Close() },
//		Check: func(ctx context.Context, c *gradio.Client) error { return c.Ping(ctx) },
//	})
//	if err != nil { ... }
//	defer p.Close(context.Background())
//
//	s, err := p.Acquire(ctx) // waits at most 30 s in a FIFO queue
//	if err != nil { ... }
//	defer s.Release() // harmless after Destroy
//	out, err := s.Value().Predict(ctx, "/upper", "hi")
//	if errors.As(err, new(*gradio.ConnectionLostError)) {
//		s.Destroy() // the session is broken: replace it
//	}
//
// The pool is generic over the session type T; it knows only the Connect,
// Close and Check functions of its [Config]. Routing between replicas,
// retries and failover belong to the caller (package pool).
//
// # Life cycle
//
// Nothing connects before the first [Pool.Acquire] (or [Pool.Warm]). Then
// MinSessions (5) connects start in parallel and the first caller is served
// by whichever is ready first. With no idle session and fewer than
// MaxSessions (50) sessions open or connecting, an Acquire starts a new
// connect; connects keep running when their caller gives up, and their
// session serves the next waiter. Sessions idle for longer than IdleTimeout
// (10 min) are closed, but never below MinSessions; idle sessions are reused
// most recently used first, so that the surplus ages out.
//
// # Waiting
//
// At MaxSessions callers wait in a strict FIFO queue: a released session is
// handed straight to the oldest waiter, and no later caller can take it
// first. A waiter fails with [ErrQueueTimeout] after QueueTimeout (30 s),
// with its context's error when that ends first, and at once with
// [ErrQueueFull] when MaxWaiters (1000) callers are already waiting.
//
// [Pool.AcquirePriority] waits in the [Priority] class it is given: higher classes are served first, FIFO within a class, and a
// waiter that has waited PriorityMaxWait (10 s) goes before younger waiters
// of higher classes. With one class (the default) the queue is the strict
// FIFO above; QueueTimeout is the same for every class.
//
// With DemandWindow set, the pool also opens sessions ahead of a rising
// load (see Config.DemandWindow); they age out by IdleTimeout when it falls.
//
// # Health
//
// Every HealthCheckInterval (5 min, ±10 %) up to HealthCheckMax (5) of the
// least recently used idle sessions are checked with Config.Check. A session
// under check is never handed out, and a check does not count as use. After
// UnhealthyAfter (3) consecutive failures a session is destroyed; the pool
// replaces destroyed sessions in the background while below MinSessions.
// [Session.Destroy] is the passive check: call it when a call failed because
// the session itself broke. [Pool.Reset] is for an app that restarted or
// changed: every session is replaced (idle ones now, the others when they
// come back). With MaxLifetime set, sessions are retired pre-emptively once
// that old, before they are handed out again.
//
// # Observability
//
// [Pool.Stat] returns a snapshot with the seed's gauges (total, available,
// in use, queue length, healthy, unhealthy) and pgxpool-like counters.
// Config.OnEvent and Config.Logger receive an [Event] for each item of the
// seed's logging list; neither is ever called with the pool's lock held.
//
// # Locking and cost
//
// One mutex guards the pool's state and is never held across Connect,
// Close, Check or a hook. Acquire and Release of an idle session take it
// once each and do not allocate (Session handles are allocated 64 at a
// time per session); a waiting Acquire allocates nothing either (queue
// entries are recycled and one timer per pool serves every waiter's
// time-out, since with one QueueTimeout the oldest waiter always expires
// first).
package sessionpool
