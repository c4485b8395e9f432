// Package gradiotest provides a simulated Gradio app and a simulated Hugging
// Face Hub, for tests, demos and benchmarks, in the manner of
// net/http/httptest.
//
//	srv := gradiotest.NewServer(nil) // DefaultApp, Gradio 5.49.1 wire format
//	defer srv.Close()
//	// srv.URL is http://127.0.0.1:port; point a Gradio client at it.
//
// The server speaks the Gradio API wire protocol closely enough for the
// official @gradio/client to use it: GET /config, {prefix}/info, queue/join +
// queue/data (sse_v3, with estimation, process_starts, progress, log,
// process_generating with diffs, process_completed, close_stream and
// heartbeats), /call, /run, upload, file=, cancel, reset, heartbeat, app_id,
// login, gr.State per session_hash and gr.Error. Everything is kept in memory;
// uploads go to a temporary directory removed by Close.
//
// # Apps
//
// [DefaultApp] has the six endpoints of the captured reference app:
//
//	fn  api_name      inputs                     outputs      behaviour
//	0   upper         text                       text         upper case
//	1   count         n (number, default 5)      text         generator: "0", "0 1", ... one per StepDelay
//	2   slow          seconds (default 3)        text         sleeps seconds*TimeScale, "slept N.NNs"
//	3   counter       text, gr.State([])         text, State  appends to the session list: "k items: a, b"
//	4   fail          text                       text         gr.Error "deliberate failure for input '<text>'"
//	5   reverse_file  file                       file         new file with the bytes reversed
//
// [ChatApp] streams an OpenAI-style message list (nested JSON diffs such as
// ["append",[1,"content"]," word"]) and keeps the history in gr.State.
//
// An [Endpoint] can also be a gr.render function (Renders: its completion
// carries a render_config with the endpoints whose RenderedIn match, which
// /config and /info leave out) or a streaming-input event (Stream: the
// handler runs on the join's data and on each chunk POSTed to
// stream/{event_id}, until stream/{event_id}/close), in Gradio 5/6 modes.
//
// Build your own with [NewApp], [App.Handle] and [App.HandleGenerator]:
//
//	app := gradiotest.NewApp()
//	app.Handle("echo", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
//		s, err := c.String(0)
//		return []any{s}, err
//	}, nil, nil) // nil: one Textbox in, one Textbox out
//	app.HandleGenerator("chat", func(ctx context.Context, c *gradiotest.Call, yield func(...any) error) error {
//		c.Log("info", "thinking")
//		c.Progress(1, 2, "steps", "half way")
//		for _, s := range []string{"Hel", "Hello"} {
//			if err := yield(s); err != nil {
//				return err // cancelled or stream dropped
//			}
//		}
//		return nil
//	}, nil, nil).ConcurrencyLimit = 4
//	srv := gradiotest.NewServer(app)
//
// Handlers get a context cancelled on POST cancel, on a dropped data stream
// and on Close; the inputs as [json.RawMessage] (State inputs already replaced
// by the session's value); and [Call.Progress], [Call.Log], [Call.Sleep]
// (scaled by TimeScale), [Call.InputFile] and [Call.FileData] for files. A
// returned [*Error] is a gr.Error (failed process_completed with the
// message, duration, visible and title); any other error is reported like an
// unexpected exception with show_error=True. Panics are recovered.
//
// # Modes
//
// [Server.Mode] picks the imitated Gradio generation ([Modes] lists them):
//
//	Gradio5        5.49.1  sse_v3   /gradio_api  (default; matches the captures)
//	Gradio6        6.25.0  sse_v3   /gradio_api  api_visibility, used_cache/cache_duration/avg_time, /call/v2
//	Gradio4SSEv3   4.44.1  sse_v3   no prefix    Python json.dumps message style
//	Gradio4SSEv21  4.21.0  sse_v2.1 no prefix    diffs, FileData meta, no close_stream: the server hangs up
//	Gradio4SSEv2   4.20.1  sse_v2   no prefix    diffs, no meta, no close_stream, /call
//	Gradio4SSEv1   4.16.0  sse_v1   no prefix    full values, no close_stream, no /call
//	Gradio4SSE     4.8.0   sse (v0) no prefix    GET queue/join per event, send_data, POST queue/data
//	Gradio3WS      3.50.2  (none)   no prefix    WebSocket queue/join per event, send_hash, send_data, file dicts
//
// Gradio3WS is not in [Modes] (the all-modes tests exercise routes Gradio
// 3 lacks); the Go client's protocol suite and the front door's
// conformance test run over it. Its WebSocket (ws.go) follows the recorded
// 3.50.2 traffic in gradio/testdata/transcripts; /info has Gradio 3's
// serializers; the config is Gradio 4.8's without "protocol" (component
// props are not 3.50.2's); a socket closed while its call still waits in
// the queue is noticed only when the call reaches send_data, where it is
// dropped (real 3.50.2 may run it for nobody).
//
// # Knobs
//
// [Knobs] is embedded in [Server]: set fields such as srv.ConnectCost before
// Start; at run time call [Server.UpdateKnobs], [Server.SetKnobs] or the
// helpers ([Server.FailNextConfigs], [Server.FailNextJoins],
// [Server.CutNextStreams], [Server.SetStall], [Server.SetQueueFull],
// [Server.Sleep], [Server.Wake], [Server.Restart], [Server.ResetFaults]), or
// use HTTP (below). [Server.CloseClientConnections] cuts every open
// connection at once (the server keeps serving); [Server.Restart] keeps the
// connections but gives a new app_id and forgets sessions, state and events
// (call both for a hard process restart). All are safe for concurrent
// use. Zero means default:
//
//	ConnectCost              delay on /config and /info                         0
//	ConnectJitter            extra random delay in [0, ConnectJitter) on each   0
//	Latency                  delay after process_starts, before the handler     0
//	StepDelay                count's pause between yields (negative: none)      300ms
//	TimeScale                multiplies slow, StepDelay, Call.Sleep and the v0  1
//	                         5 s send_data wait
//	HeartbeatInterval        heartbeat messages and ALIVE period                15s
//	MaxQueueSize             waiting events before 503 "Queue is full"          unlimited
//	DefaultConcurrencyLimit  per endpoint unless Endpoint.ConcurrencyLimit       1 (negative: unlimited)
//	MaxFileSize              upload limit in bytes (413), config max_file_size  unlimited
//	StateTTL                 gr.State lifetime after /heartbeat closes          1h (negative: forever)
//	FaultStatus              status of FailConfig/FailJoin answers              500
//	FailConfig               the next N GET /config fail
//	FailJoin                 the next N joins (queue/join, /call, v0 join) fail
//	CutStream                data streams are aborted right after each of the next N process_starts;
//	                         the session's events are dropped as on a disconnect
//	Stall                    every request hangs (until cleared, client gone or Close)
//	SlowBody                 responses trickle 64 bytes per SlowBody
//	QueueFull                every join gets 503 "Queue is full"
//	Asleep                   503 on every route (a sleeping Space); see Sleep/Wake
//
// Other Server fields: Mode, App, Username/Password (login mode: POST /login
// sets the access-token cookies; protected routes answer 401
// {"detail":{"error":"Not authenticated","auth_message":null}}), AppID (zero:
// random above 2^63, new on every Start and Restart), HFToken (a private
// Space behind the HF proxy: requests need "Authorization: Bearer <token>",
// "X-HF-Authorization: Bearer <token>" or a ?__sign= JWT from the Hub, else a
// non-JSON 401; Hub.SetPrivate sets it), UploadDir, Logger, Listener (to
// choose the address), IgnoresDroppedStreams (a dropped stream is never
// noticed, as on the real 4.20.1: a session's queued calls are not
// dropped).
//
// [Server.Executions] counts handler starts per api_name (a call refused at
// join never starts; one cancelled while queued does start later, as on real
// Gradio, unless its session's stream was dropped first); [Server.Requests] counts
// requests per route ("config", "info", "queue/join", "queue/data", "call",
// "upload", ...) before faults apply, so tests can tell how many connects a
// client made. [Server.Snapshot] returns both with the queue state.
//
// # Control over HTTP
//
// Every replica serves /_sim/ (never stalled, asleep or protected), so
// black-box tests can steer a running process (for example `gradiopool sim`):
//
//	GET  /_sim/state        Snapshot: mode, version, app_id, knobs, executions, requests, queued, running, sessions
//	GET  /_sim/executions   {"upper": 3, ...}
//	GET  /_sim/requests     {"config": 2, "queue/join": 5, ...}
//	POST /_sim/faults       KnobsJSON: any subset, e.g. {"fail_join":2,"latency":"250ms","stall":true}
//	                        (durations as "250ms" or seconds); answers the new state. Alias /_sim/knobs.
//	POST /_sim/reset        knobs back to their Start values, executions zeroed
//	POST /_sim/sleep        {"wake_after":"2s"} optional: asleep; the first visit starts the wake timer
//	POST /_sim/wake         awake now
//	POST /_sim/restart      new app_id, sessions, state and events dropped
//
// # Hub
//
// [Hub] emulates the Hugging Face Hub API the clients use to resolve Space
// ids: GET /api/spaces/{owner}/{name}/host, /api/spaces/{id},
// /api/spaces/{id}/runtime and /api/spaces/{id}/jwt, with stages RUNNING,
// SLEEPING (the replica answers 503 and wakes WakeDelay after a look-up or a
// visit), BUILDING, PAUSED, RUNTIME_ERROR, NO_APP_FILE, CONFIG_ERROR and
// others, private Spaces (401 without "Authorization: Bearer <token>") and
// 404 for unknown ones.
//
//	hub := gradiotest.NewHub()
//	defer hub.Close()
//	hub.AddSpace("sim/replica-1", srv)       // public, RUNNING; host = srv.URL
//	hub.SetPrivate("sim/replica-1", "hf_x")  // now 401 without "Authorization: Bearer hf_x"
//	hub.SetStage("sim/replica-1", gradiotest.StageSleeping)
//	// resolve "sim/replica-1" against hub.URL
//
// Other Hub methods: [Hub.AddSpaceURL] (a replica in another process),
// [Hub.RemoveSpace], [Hub.SetWakeDelay] (default [DefaultHubWakeDelay]),
// [Hub.SetConnectCost], [Hub.SetStageFor] (a stage that turns RUNNING after a
// delay, e.g. a build), [Hub.Stage] and [Hub.Lookups]. Bodies follow the
// shapes the official clients' test mocks use: /host gives
// {"subdomain","host"}, /api/spaces/{id} gives {id, author, private, sdk,
// host, subdomain, runtime{stage, hardware, storage, gcTimeout, replicas,
// devMode, domains}}, /runtime the runtime object, /jwt {"token"}.
//
// The Hub also runs each Space's runtime as the Hub API does (hubruntime.go):
// POST /api/spaces/{id}/pause (PAUSED at once), /restart (BUILDING, then
// APP_STARTING, then RUNNING; ?factory=true takes the same path), /sleeptime
// {"seconds": N} (-1: never; idle N seconds, a RUNNING Space becomes
// STOPPED) and /hardware {"flavor"} each answer the runtime JSON; only the
// owner's token may (401 without a token, 403 with another: SetOwnerToken).
// While a Space is not RUNNING its replica answers 503 to every request; a
// request to a STOPPED Space's app wakes it (APP_STARTING, then RUNNING), a
// PAUSED one stays paused. Stages advance from timestamps on the Hub's clock
// (SetClock), so a benchmark can replay a week in seconds; build and start
// durations are knobs (SetStartTimes, SetStartSpread for a lognormal
// spread). Bill meters the seconds billed per Space (APP_STARTING and
// running; not a build, a pause or a sleep) at the hardware's hourly price.
// SetRateLimit answers 429 with RateLimit, RateLimit-Policy and Retry-After
// headers past a budget per token per 5 minutes; SetLookupWakes makes a Hub
// look-up wake a STOPPED Space (unverified on the real Hub: off by
// default). The real Hub's answer from a sleeping Space's own URL was not
// checked here: the emulation's 503 is the simulator's choice.
//
// # The sim command
//
// `gradiopool sim -replicas 3` runs replicas on loopback (consecutive ports
// from -addr, else random), registers them as sim/replica-1..N (and the first
// three also as owner/app, owner/app-dev and owner/app-stage), starts a Hub,
// prints their URLs and serves until interrupted. -app chat serves ChatApp,
// -mode picks a Mode, -private TOKEN makes the Spaces private. Its flags set the knobs
// above (-connect-cost applies to each of the Hub look-up, /config and
// /info); `gradiopool sim -h` lists them.
//
// # Deviations from real Gradio
//
//   - Durations and ETAs are measured on the simulator, not Gradio's.
//   - /run returns the final value of a generator (Gradio 4+ returns the
//     first yield).
//   - /call "error" data is the error payload dict in Gradio 5 mode too (real
//     4.20-6.12 send null, 6.13+ the dict); 4.x modes send null.
//   - Expired gr.State is dropped when the session is next used, not by a
//     sweeper; the session table keeps at most 10000 sessions (idle ones are
//     forgotten first), like Gradio's LRUs.
//   - Progress updates are not coalesced; estimations are re-sent to waiting
//     events when a job starts (not on a timer), and not at all when more
//     than 200 wait.
//   - /cancel stops every running job of that session and fn_index, as
//     Gradio does, but only the named event gets the synthetic completion.
//     Like Gradio 4.x-5.x (measured on 5.49.1), it leaves a queued event
//     in the queue: it runs when its turn comes, for nobody; dropping the
//     session's data stream is what removes a session's queued events.
//     In Gradio6 mode it removes the event, as Gradio 6.25.0 does.
//   - A dropped data stream removes the session's queued events at once in
//     every mode. Real Gradio 6.25.0 notices the drop only at its next 10 s
//     poll, and real 4.20.1 (sse_v2) never removes them: its
//     CustomCORSMiddleware is a Starlette BaseHTTPMiddleware, under which
//     the stream's route never sees the disconnect (a call whose session's
//     stream was dropped ran 30 s later); the client does not rely on
//     either (docs/notes-queued-takeback.md).
//   - The 4.x shapes follow the 4.8, 4.16 and 4.20 captures; 4.21 and 4.44
//     details not captured (e.g. log fields) use the nearest known shape.
//   - Not implemented: upload_progress, component_server, queue/status,
//     stream/ routes (connection "stream", process_streaming), URL file
//     inputs, unload events, the ws protocol of Gradio 3.
package gradiotest
