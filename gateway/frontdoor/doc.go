// Package frontdoor serves the gateway's whole Gradio-shaped surface, so
// that it looks like one Gradio app: queue/join and queue/data, heartbeat,
// cancel, reset, /config, /info, /upload, file= (a [FrontDoor] over the
// pool). The official clients (@gradio/client, gradio_client) and plain
// HTTP callers connect to the gateway unchanged and their calls run on the
// pool's replicas. Gradio's REST call API (/gradio_api/call/*) is apart,
// in gateway/restcall: it needs no pool.
//
//	fd := frontdoor.New(p, frontdoor.Config{})   // p: a *pool.Pool (see Pool)
//	defer fd.Close()
//	for _, rt := range fd.Routes() { mux.HandleFunc(rt.Pattern, rt.Handler) }
//
// # Sessions
//
// A caller's session_hash is the unit of stickiness. Its first queue/join
// picks a replica (the user's pinned replica when X-Gradiopool-User names a
// user, else the least loaded) and a fresh backend session hash there; its
// later calls to endpoints with gr.State, the stream of its calls there,
// cancel, and the files of those calls go to the same replica and backend
// session, so gr.State, event ids and uploads stay together. The session
// lives in the front door that binds it (in a cluster of gateways, the
// session's owner: the others forward its requests there) and expires when
// the caller has no stream open (data or heartbeat) and made no request
// for Config.SessionTTL.
//
// A call to an endpoint that keeps no session state ([FrontDoor.Spreadable])
// goes to the replica the pool picks for it at that moment, under the
// session's backend session hash there (one per replica). The caller's one
// queue/data stream then multiplexes one backend stream per replica running
// a call of the session (handleData).
//
// Each call in flight holds one slot of its replica's session pool, from
// its join until its process_completed passes through the gateway (or its
// stream is lost, or the session expires), so the pool's MaxConnections
// still bounds the calls in flight per replica; an idle caller session
// holds no slot.
//
// # Failover
//
// A join that the replica refused (not sent, a 5xx, a full queue) moves the
// session to another replica when it has no call in flight there: a new
// backend session, whose gr.State starts empty; the gateway logs this and
// counts it (Stats.StateLost). A join that was accepted and then lost (the
// replica's stream broke) is reported to the caller as Gradio reports an
// error (process_completed with success false), never run again.
//
// # One app
//
// The reference app is the one most connected replicas serve at first
// use (ties: pool order); /config and /info come from the first replica
// serving it. Every replica's config is compared with it by
// shape (appshape.Shape: fn_index order, api_names, input and output
// component types in order; not app_id, root, labels, component ids
// (mapped per replica, appshape.IDMaps), nor the Gradio generation: protocol,
// API prefix, version): a replica that
// differs gets no session while it differs and is reported per replica
// (an error log line, Stats.Mismatched). The gateway keeps serving with
// the replicas that match rather than failing to start, so that a rolling
// upgrade does not take it down.
//
// # Older generations
//
// Today's official clients finish calls only over sse_v3 (Gradio 4.22+).
// Each call is served the way the replica it runs on needs, decided per
// call once its replica is known (mixed.go): relayed byte for byte when
// that replica speaks sse_v3 (with or without the /gradio_api prefix: the
// gateway uses the replica's own URLs and writes file URLs under the
// prefix it presents), bridged otherwise (bridge.go: sse, sse_v1, sse_v2,
// sse_v2.1, Gradio 3's ws): the gateway runs the call with the Go client
// on a session of the caller session's own on that replica and writes its
// events as sse_v3 messages. So a replica set may mix generations (a
// rolling upgrade): callers see one app as long as the endpoints match.
// /config is the reference replica's: passed through when it speaks
// sse_v3, else presented as Gradio 5 (protocol sse_v3, /gradio_api,
// version 5.49.1); gr.Error texts are given the presented generation's
// form (Gradio before 5 quotes them). A caller session keeps one
// queue/data stream whatever its calls run on: the relayed replicas'
// streams and the bridge's messages are written to it. Stateless calls
// spread over every replica, of any generation; calls with gr.State run on
// the session's replica, and a session that moves to a replica of another
// generation starts with an empty gr.State there, as any move does.
//
// # Files
//
// Uploads carry no session hash, so the gateway keeps each upload and sends
// it to the replica of the session whose join uses it (once per replica).
// Output file URLs and paths are rewritten to the gateway as
// /gradio_api/file=/gradiopool/{replica}/{signature}/{path}: the signature
// (HMAC of the replica and the path) makes the URL a capability, so a
// caller can fetch only files the gateway handed out, and never a file of
// the gateway host.
package frontdoor
