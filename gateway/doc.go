// Package gateway serves a pool of Gradio replicas (package pool) over HTTP
// to callers in any language. Around the calls it adds the pool
// statistics, Prometheus metrics, health endpoints, API keys, a graceful
// drain and the Gradio front door (package frontdoor, which serves every
// Gradio-shaped route, /gradio_api/call included).
//
//	var cfg gateway.Config
//	_ = cfg.LoadFile("gradiopool.yaml")    // optional; unknown keys are errors
//	_ = cfg.ApplyEnv(os.LookupEnv)         // GRADIOPOOL_* and the secrets
//	g, err := gateway.Open(ctx, cfg, logger) // validates; metrics, Redis store, pool, gateway
//	if err != nil { ... }
//	defer g.Close(context.Background())    // the pool and the Redis client
//	ln, _ := net.Listen("tcp", cfg.Listen)
//	err = g.Serve(ctx, ln) // until ctx ends, then drains
//
// Tests and programs that bring their own backend (a fake, or a pool they
// also call directly) use [New] with [PoolBackend] instead.
//
// `gradiopool serve` is exactly this; `gradiopool demo` runs it in front of
// simulated replicas.
//
// # HTTP API
//
//	POST /v1/predict/{api_name}            {"data":[...]} or {"data":{"name":...}} -> {"data":[...],"replica":"...","duration_ms":N}
//	POST /v1/submit/{api_name}             {"data":[...]} -> text/event-stream
//	POST /gradio_api/call/{api_name}       {"data":[...]} -> {"event_id":"..."}
//	GET  /gradio_api/call/{api_name}/{id}  -> text/event-stream, Gradio's records
//	GET  /api/admin/pool-stats             the seed's pool-stats JSON (pool.Stats)
//	GET  /metrics                          Prometheus text format
//	GET  /healthz                          liveness: 200 while the process serves
//	GET  /readyz                           200 when a replica is usable, else 503 (also while draining)
//
// The caller's user is the X-Gradiopool-User header (an e-mail, trimmed and
// lower-cased; the pool keys it by HMAC and never stores it) or nothing for
// anonymous callers. X-Gradiopool-Timeout ("90s" or "90") sets the caller's
// own deadline for the call; past it the answer is 504.
// X-Gradiopool-Priority (high, normal, low) is the class the call waits in
// when its replica has no free session (see pool.CallOptions).
//
// POST /v1/submit answers these events, each "event: NAME\ndata: JSON":
//
//	waiting   {"rank":0,"queue_size":3,"eta":0.8}      place in the gateway's own queue (all sessions busy; eta null until measured)
//	accepted  {"replica":"app"}                        the app accepted the call
//	queued    {"rank":0,"queue_size":2,"eta":1.5}      position in the app's own queue
//	started   {}                                       the app began running it
//	progress  {"progress":[{"index":..,"length":..,"unit":..,"progress":..,"desc":..}]}
//	log       {"log":"...","level":"info"}             gr.Info / gr.Warning
//	output    {"data":[...]}                           each partial (generator) output
//	complete  {"data":[...],"replica":"...","duration_ms":N}
//	error     {"error":{"code":"...","message":"..."}}
//
// and a ": keep-alive" comment every keepalive_interval (15 s) so that idle
// proxies keep long streams open. A caller that disconnects cancels the
// app's job; its session goes back to the pool.
//
// The Gradio REST shape (restcall.Calls; the gateway reads, admits and
// runs its calls as it does /v1's) keeps each call's records for
// pending_call_ttl after it ended (at most max_pending_calls calls):
// "event: generating" per partial output, then "event: complete" with the
// outputs or "event: error" with {"error":"message","code":"...",
// "title":"..."}; "event: heartbeat" while waiting. An unknown or expired
// id gives `event: error` / `data: "404: Not Found"` like Gradio.
//
// # Errors
//
// Errors are {"error":{"code":"...","message":"..."}}:
//
//	400 bad_json, bad_arguments (wrong arity), bad_user, bad_timeout
//	401 unauthorized (no key or token)      403 forbidden (wrong key or token)
//	404 unknown_endpoint, not_found (route)  405 method_not_allowed (with Allow)
//	413 body_too_large, upload_too_large
//	422 app_error: the app raised gr.Error; "message" is its message, "title" its title
//	502 all_replicas_failed (the message names each replica's cause), connection_lost,
//	    upstream_error, upstream_unauthorized (the Space refused HF_TOKEN)
//	503 queue_timeout, queue_full, app_queue_full, too_many_pending_calls,
//	    replica_unavailable, draining, closed: all with Retry-After
//	504 deadline_exceeded (the caller's own X-Gradiopool-Timeout passed)
//
// # Authentication
//
// When GRADIOPOOL_API_KEYS is set, /v1/* and /gradio_api/* need
// "Authorization: Bearer <key>". When GRADIOPOOL_ADMIN_TOKEN is set,
// /api/admin/* and /metrics need "Authorization: Bearer <token>" (Prometheus:
// authorization.credentials). Either unset leaves those endpoints open.
// /healthz and /readyz are always open. Keys are compared in constant time.
//
// # Time-outs and drain
//
// The server has a ReadHeaderTimeout but no WriteTimeout: a 10-minute call
// is never cut by the gateway. Time-outs belong to phases: the pool's queue
// timeout, its connect retries, the caller's own deadline. On SIGTERM
// [Gateway.Serve] stops accepting, lets calls in flight finish for up to
// drain_timeout, cancels the rest at their apps and returns nil.
//
// # Several instances
//
// Instances behind one load balancer keep a user on one replica when they
// share the user assignments: `gradiopool serve` puts them in Redis when
// GRADIOPOOL_REDIS_URL is set (package pool/assign), which needs the same
// GRADIOPOOL_HASH_KEY on every instance.
//
// # Logs and metrics
//
// Logs are slog records (JSON, or text on a terminal): the pool's events
// (initialisation, sessions created and removed, user assignments, queue
// changes, health checks, errors, time-outs, failovers) and one "http
// request" line per request with its route, status, duration and the
// caller's user hash. E-mails appear only as keyed hashes; tokens and keys
// never (Config and Secrets redact themselves).
//
// [Metrics] are on a registry of their own; labels are replica names, route
// patterns, status codes, error codes and session states, never an e-mail, a
// key or a session id.
package gateway
