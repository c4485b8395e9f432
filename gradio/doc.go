// Package gradio is a client for Gradio apps (self-hosted or Hugging Face
// Spaces), speaking the same wire protocol as the official Python and JS
// clients, built for many parallel calls.
//
//	c, err := gradio.Connect(ctx, "owner/space", gradio.WithHFToken(os.Getenv("HF_TOKEN")))
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	out, err := c.Predict(ctx, "/upper", "hello")   // out[0] is `"HELLO"`
//
//	job, err := c.Submit(ctx, "/count", 5)          // a generator
//	for ev := range job.Events() {
//		fmt.Println(ev.Kind, ev.Rank, ev.Data)       // queued, started, output..., completed
//	}
//	final, err := job.Wait(ctx)
//
// # Connecting
//
// Connect takes a Space id ("owner/name", resolved through the Hub API,
// see WithHubURL and WithWakeTimeout) or the app's URL. A URL costs one
// round trip (GET /config); /info is fetched only when a call needs keyword
// arguments or parameter defaults (or with WithEagerInfo). Every Client of
// one Connect shares one tuned http.Transport (keep-alive pool sized for
// 50+ parallel calls; phase time-outs for dial, TLS and response headers;
// no global deadline, so 10-minute calls are fine).
//
// # Sessions
//
// A Client is one session hash. Gradio keys gr.State and the queue stream
// on it: concurrent calls of one Client share one GET queue/data stream,
// demultiplexed by event id. NewSession returns a Client with a fresh
// session hash on the same app without any network request; a pool keeps
// one per slot. For a session the app already knows (sse_v3), the stream is
// opened while the queue/join request is still in flight, which saves a
// round trip per call; messages that arrive before the join's answer are
// buffered. The /heartbeat/{session} stream is opened lazily on the
// first call when the app's config asks for it (connect_heartbeat, as the
// JS client does; WithHeartbeat overrides) and kept until Close.
//
// # Endpoints and arguments
//
// Endpoints are named by api_name ("upper" or "/upper") or by fn_index
// with FnIndex(i) ("#i"), the only way to reach a dependency without an
// api_name. Private endpoints (api_name false, api_visibility "private") and
// front-end functions (backend_fn false) are never callable. Arguments are
// the parameters without State inputs (sent as null); trailing parameters
// with defaults may be omitted and a final Kwargs passes them by name. The
// count is checked before any request (*ArgumentError).
//
// Outputs are raw JSON values, one per output component, with State (and
// other skip_api) outputs dropped as the Python client does. Generator
// diffs (sse_v2+) are applied, so every EventOutput carries full values.
//
// # Files
//
// File(path), FileReader(name, r) and FileURL(u) arguments (also nested in
// []any / map[string]any) are uploaded (POST {prefix}/upload) or passed by
// URL and sent as FileData; the app's max_file_size is enforced locally
// (*UploadTooLargeError). ParseFileData decodes file outputs and
// Client.Download fetches them.
//
// # Cancellation and errors
//
// The ctx of Submit governs the job: when it ends the client POSTs /cancel
// (detached, with its own short time-out) and the job ends with ctx's
// error. An error from Submit means the app did not accept the call. Errors
// are typed for callers that branch: *AppError (gr.Error), ErrQueueFull,
// *SpaceError, *MetadataError, *ConnectError, *ArgumentError,
// *ProtocolError, *UploadTooLargeError, *ConnectionLostError (with
// Accepted), ErrUnsupportedProtocol, ErrClosed, ErrAppChanged (Ping),
// ErrUnknownEndpoint, ErrCanceled. Tokens and passwords never appear in
// errors, logs or String output.
//
// # Protocols
//
// sse_v3 with and without api_prefix (Gradio 4.22-6.x), sse_v2.1 and sse_v2
// (diffs; the server hangs up instead of sending close_stream, so the
// client tracks its pending calls), sse_v1 and sse (v0: one stream per
// call, send_data), and Gradio 3 ("ws", config without protocol: one
// WebSocket per queued call, POST /run/predict for unqueued ones; file
// arguments are uploaded through /upload and sent as Gradio 3's file dict
// {"name": path, "is_file": true, ...}, whose outputs ParseFileData reads;
// URL file arguments are refused there, as Gradio 3 only takes files on its
// own disk). Other protocols (Gradio 2, unknown
// future ones) fail Connect with ErrUnsupportedProtocol.
//
// # Cancellation by protocol
//
// sse_v3 apps of Gradio 4.29+ get POST {prefix}/cancel (and /reset for
// 4.x). sse v0 and ws calls are cancelled by closing their own stream or
// socket. sse_v1/v2/v2.1 and sse_v3 before 4.29 have no cancel route: the
// local job ends at once, and the app stops the work only when the
// session's stream closes. Gradio 4.x-5.x keep a cancelled event that is
// still queued and run it later (6.x removes it); so on Gradio 4.16 and
// 4.29-5.x, when the cancelled job is the session's only call and has not
// started (or the app has no cancel route), the client hangs up the
// session's stream instead, which makes Gradio drop the session's queued
// events at once; the session's next call waits 250 ms so that it is not
// dropped with them. Gradio 3.50, 4.8 and 4.20 have no way to take a
// queued call back: it runs later (docs/COMPATIBILITY.md).
//
// # Transports
//
// Calls go through the app's queue protocol. WithCallTransport (and, on
// its own, a queue/join answered with 404 or 405) makes them use Gradio's
// REST shape instead, POST {prefix}/call/{api_name} then GET the event's
// stream (Gradio 4.20+; before 6.0 without gr.State between calls and
// without gr.Error messages, Gradio's limits).
//
// # gr.render and streaming inputs
//
// A call whose completion carries a render_config (gr.render, Gradio
// 4.31+) merges the rendered components and dependencies into its
// session's view of the config (Client.Config; render.go), so the rendered
// endpoints can then be called from that session; other sessions keep the
// app's config, as the server does. A streaming-input event (Gradio 5+,
// connection "stream") is started with Submit and fed with Job.SendChunk
// until Job.CloseStream (stream_input.go).
//
// Gradio before 5.0 sends a gr.Error's message as Python's repr (quoted);
// the client unquotes it, so *AppError.Message is the same everywhere.
package gradio
