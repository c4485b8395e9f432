// Package pool spreads the calls of one Gradio app over its replicas
// (usually Hugging Face Spaces) through pools of warm sessions. It keeps
// each user on the same replica, waits in FIFO queues with time-outs,
// health-checks sessions and fails over when a replica cannot serve.
//
//	p, err := pool.New(pool.Config{
//		Replicas: []string{"owner/app_1", "owner/app_2", "https://app-3.example.com"},
//		ClientOptions: []gradio.Option{gradio.WithHFToken(os.Getenv("HF_TOKEN"))},
//	})
//	if err != nil { ... }
//	defer p.Close(context.Background())
//
//	res, err := p.Predict(ctx, "alice@example.com", "/upper", "hello")
//	// res.Data[0] is the JSON output, res.Replica the replica that ran it.
//
// For more control, Acquire lends a session ([Lease]) for any number of
// calls, the Go form of the seed design's getGradioClient(email):
//
//	lease, err := p.Acquire(ctx, email)
//	if err != nil { ... }
//	defer lease.Release()
//	out, err := lease.Client().Predict(ctx, "/upper", "hello")
//
// # Replicas and sessions
//
// Nothing connects before the first call (or [Pool.Warm]). Then every replica
// connects its app once (Hub look-up and config: gradio.Connect; concurrent
// first callers share that one connect) and creates Config.MinConnections
// sessions in the background. A session is the connected app plus a session
// hash of its own (gradio.Client.NewSession: no network), and it serves one
// call at a time, so MaxConnections (50) bounds a replica's calls in flight.
// Each replica has its own session pool (package sessionpool): most recently
// used idle session first, new sessions on demand up to the maximum, then a
// FIFO queue whose waiters give up after QueueTimeout (ErrQueueTimeout);
// [CallOptions].Priority puts a call in a higher or lower class of that queue.
// Idle sessions above the minimum close after IdleTimeout; a few idle
// sessions are pinged every HealthCheckInterval and destroyed after
// UnhealthyAfterFailures failed pings. When a ping reports that the app
// restarted (gradio.ErrAppChanged), the replica connects again once and its
// sessions are replaced.
//
// # Routing users
//
// A user is identified by an e-mail that is trimmed, lower-cased and turned
// into a user key: the first 128 bits of HMAC-SHA256 keyed by Config.HashKey.
// The e-mail itself is never stored, logged or reported; logs show the first 8
// hex digits of the key.
//
//   - A new user goes to the next replica in round robin and is pinned to it.
//   - A known user goes to their replica. The assignment lives
//     UserAssignmentTTL (1 h) after the user's last call: every call refreshes
//     it, so an active user never moves unless their replica fails, or,
//     with Config.RebalanceFactor, unless a call is expected to take that
//     many times longer there than on the quickest replica.
//   - An anonymous user ("") goes to the replica where the call is expected
//     to complete first (ties within 5 % go round robin): the Space's own
//     queue for the endpoint (from the estimation messages of our calls),
//     our calls and waiters there, times the run time (the Space's average
//     or measured), over the concurrency seen there (see Routing and
//     ReplicaStats.Endpoints). RouteLeastInUse counts only our calls.
//   - A replica that cannot serve (ejected, connect failure, waiter list
//     full) is skipped, and the user is re-pinned to the replica that served.
//
// Assignments live in an [assign.Store]: in memory by default, or a shared
// implementation (e.g. Redis) given as Config.Store.
//
// # Sticky sessions
//
// With Config.StickySessions a registered user also keeps their own Gradio
// session (session hash) on their replica for UserAssignmentTTL, so gr.State
// survives between calls of a stateful app. Such a session is never lent to
// anyone else. A user's calls then run one at a time: a call waits (up to
// QueueTimeout) while the same user's previous call is still running. Each
// call still takes a slot of the replica's pool, so MaxConnections and the
// queue keep bounding the replica's load. When the assignment expires, or
// the replica's app restarts, the session (and its state) is dropped.
//
// # Failures and failover
//
// A call is never run twice. It moves to another replica only when the
// replica provably did not accept it:
//
//   - connect time-out or transport failure (*gradio.ConnectError): retried
//     ConnectRetries (3) times on the same replica with a growing delay, then
//     the next replica. Each attempt is bounded by the client's phase
//     time-outs (dial 10 s, gradio.WithHeaderTimeout 30 s), so a replica that
//     accepts connections but never answers delays its users by up to four of
//     them; callers that share the connect wait for it within their own
//     context;
//   - the Space's metadata cannot be loaded (*gradio.MetadataError) or the
//     Space is not running (*gradio.SpaceError): the next replica at once;
//   - queue/join refused: the app's queue is full (gradio.ErrQueueFull), a 5xx
//     answer other than 504, or a transport failure before the join request
//     was written in full.
//
// Once the join request was sent in full, any failure (no answer, the stream
// dropped, the app raised an error, the caller's context ended) is returned
// to the caller: the app may have queued the job even when its event id never
// arrived (gradio.ConnectionLostError.MaybeAccepted). It is wrapped in a
// [*ReplicaError]. A dropped connection destroys the session
// (the pool replaces it). When every replica failed, the error is an
// [*AllReplicasFailedError] naming each replica's cause.
//
// A replica that fails (a connect that failed after its retries, a metadata
// error, or three refused joins in a row; a full queue does not count) is
// ejected for a growing back-off (1 s, 2 s, 4 s, ... up to 1 min) and
// skipped meanwhile; after the back-off, the next caller probes it (one
// connect or Ping) before it takes traffic again. Stats shows the state.
//
// # Observability
//
// [Pool.Stats] returns the seed design's pool-stats JSON (the same field
// names, plus additions such as each replica's state, calls, errors and
// failovers). Config.OnEvent receives an [Event] for initialisation,
// connects, sessions created and destroyed, assignments, queue changes,
// health checks, ejections, failovers and finished calls: a hook for
// metrics. Config.Logger receives the same as slog records.
package pool
