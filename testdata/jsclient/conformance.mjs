#!/usr/bin/env node
// Conformance checks of a Gradio app (the gradiotest simulator or a real
// Gradio 5/6 app serving the six captured endpoints) as seen by the OFFICIAL
// @gradio/client, pinned in package.json.
//
// Usage:
//   node conformance.mjs URL [--wire-out FILE] [--sim] [--only a,b] [--timeout-ms N]
//                            [--auth-url URL --auth USER:PASS]
//                            [--api-prefix /gradio_api] [--version-re '^[56]\.']
//                            [--hub-url URL --space OWNER/NAME]
//                            [--private-space OWNER/NAME --hf-token TOKEN]
//                            [--sleeping-space OWNER/NAME]
//                            [--sticky-header 'NAME: VALUE']
//   GRADIO_URL=URL node conformance.mjs
//
// Output: one JSON object per line on stdout, one per check:
//   {"name":"predict/upper","ok":true,"detail":...}
//   {"name":"cancel/server_stops","ok":true,"skipped":true,"detail":"why"}
// The exit status is 1 when any check failed, 2 on a usage error.
//
// --wire-out FILE runs one more client through a tiny logging reverse proxy
// (the same kind of proxy that captured the real Gradio 5.49.1 transcripts) and
// writes every request, response header and SSE message it saw to FILE as
// JSON. conformance_test.go compares that record with the shapes copied from
// the real captures.
//
// --auth-url names a second copy of the app launched with auth=(USER, PASS)
// (Gradio's login); the auth/... checks log in to it with the official client.
//
// --api-prefix and --version-re say what the app's config must announce
// (defaults: Gradio 5/6 under /gradio_api; use --api-prefix "" --version-re
// '^4\.' for a Gradio 4.22-4.44 app).
//
// --hub-url and --space test Space-id resolution: @gradio/client looks Space
// ids up on its built-in Hub origin, so the script rewrites those fetches
// (any non-loopback https://.../api/spaces/... URL) to --hub-url, the
// simulator's Hub emulation, where --space maps to the app.
//
// --sticky-header is sent by the two clients of cancel/queued_job, whose jobs
// must wait in one app's queue: behind a load balancer over several replicas
// (the gradiopool gateway) a sticky key such as X-Gradiopool-User keeps them
// on one replica. Without it the check runs exactly as before.
//
// --sim says the app is the gradiotest simulator, which enables the checks
// that read its /_sim/ control endpoints (for example that a cancelled job
// really stopped running on the server).
//
// stdout carries only result lines: anything the client library prints goes
// to stderr.

import http from "node:http";
import { readFileSync, writeFileSync } from "node:fs";
import { Client, handle_file } from "@gradio/client";

console.log = console.error; // keep stdout for result lines only
console.info = console.error;

const CLIENT_VERSION = JSON.parse(
	readFileSync(
		new URL("./node_modules/@gradio/client/package.json", import.meta.url)
	)
).version;

// ---------------------------------------------------------------- arguments

function parseArgs(argv) {
	const o = { url: process.env.GRADIO_URL || "", wireOut: "", sim: false, only: null, timeoutMs: 60000, authURL: "", auth: "", apiPrefix: "/gradio_api", versionRe: "^[56]\\.", hubURL: "", space: "", privateSpace: "", hfToken: "", sleepingSpace: "", stickyHeader: null };
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		if (a === "--wire-out") o.wireOut = argv[++i];
		else if (a === "--sim") o.sim = true;
		else if (a === "--auth-url") o.authURL = argv[++i].replace(/\/+$/, "");
		else if (a === "--auth") o.auth = argv[++i];
		else if (a === "--api-prefix") o.apiPrefix = argv[++i];
		else if (a === "--version-re") o.versionRe = argv[++i];
		else if (a === "--hub-url") o.hubURL = argv[++i].replace(/\/+$/, "");
		else if (a === "--space") o.space = argv[++i];
		else if (a === "--private-space") o.privateSpace = argv[++i];
		else if (a === "--hf-token") o.hfToken = argv[++i];
		else if (a === "--sleeping-space") o.sleepingSpace = argv[++i];
		else if (a === "--sticky-header") {
			const h = argv[++i];
			const c = h.indexOf(":");
			if (c <= 0) usage("--sticky-header wants 'NAME: VALUE'");
			o.stickyHeader = { [h.slice(0, c).trim()]: h.slice(c + 1).trim() };
		}
		else if (a === "--only") o.only = new Set(argv[++i].split(","));
		else if (a === "--timeout-ms") o.timeoutMs = Number(argv[++i]);
		else if (a.startsWith("--")) usage(`unknown flag ${a}`);
		else o.url = a;
	}
	if (!o.url) usage("missing app URL");
	if (o.authURL && !o.auth.includes(":")) usage("--auth-url needs --auth USER:PASS");
	o.url = o.url.replace(/\/+$/, "");
	return o;
}

function usage(msg) {
	process.stderr.write(`conformance.mjs: ${msg}\nusage: node conformance.mjs URL [--wire-out FILE] [--sim] [--only a,b] [--timeout-ms N] [--auth-url URL --auth USER:PASS]\n`);
	process.exit(2);
}

const opts = parseArgs(process.argv.slice(2));

// hubLookups records the Hub requests that were redirected to --hub-url.
const hubLookups = [];
if (opts.hubURL) {
	const realFetch = globalThis.fetch;
	globalThis.fetch = (input, init) => {
		const u = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
		const loopback = u.hostname === "127.0.0.1" || u.hostname === "localhost" || u.hostname === "[::1]";
		if (!loopback && u.protocol === "https:" && u.pathname.startsWith("/api/spaces/")) {
			const to = opts.hubURL + u.pathname + u.search;
			hubLookups.push(to);
			return realFetch(to, init);
		}
		return realFetch(input, init);
	};
}

// ---------------------------------------------------------------- reporting

let failed = 0;

function emit(obj) {
	process.stdout.write(JSON.stringify(obj) + "\n");
}

class Skip extends Error {}

// guard bounds a step that might hang forever (a lost SSE message, say):
// the bound is a hang guard, never a performance assertion.
function guard(promise, ms, what) {
	let timer;
	return Promise.race([
		promise,
		new Promise((_, reject) => {
			timer = setTimeout(() => reject(new Error(`${typeof what === "function" ? what() : what}: no answer after ${ms} ms (hang guard)`)), ms);
		})
	]).finally(() => clearTimeout(timer));
}

// step names where a long check is, for its hang guard's message.
let currentStep = "";
function step(s) {
	currentStep = s;
}

async function check(name, fn) {
	if (opts.only && name !== "connect" && ![...opts.only].some((p) => name === p || name.startsWith(p + "/"))) return;
	currentStep = "";
	try {
		const detail = await guard(Promise.resolve().then(fn), opts.timeoutMs, () => (currentStep ? `${name} (at: ${currentStep})` : name));
		emit({ name, ok: true, detail: detail ?? null });
	} catch (e) {
		if (e instanceof Skip) {
			emit({ name, ok: true, skipped: true, detail: e.message });
			return;
		}
		failed++;
		emit({ name, ok: false, detail: String(e && e.stack ? e.message : e) });
	}
}

function assert(cond, msg) {
	if (!cond) throw new Error(msg);
}

function eq(got, want, what) {
	const g = JSON.stringify(got);
	const w = JSON.stringify(want);
	if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`);
}

// ---------------------------------------------------------------- helpers

// Like the probe of the real captures, subscribe to status events as well as
// data (the default is data only).
const EVENTS = { events: ["data", "status", "log"] };

async function connect(url = opts.url, options = EVENTS) {
	return guard(Client.connect(url, options), opts.timeoutMs, `Client.connect(${url})`);
}

// collect iterates a submit() job to its end and returns every event.
async function collect(job) {
	const events = [];
	for await (const ev of job) {
		events.push(ev);
		if (ev.type === "status" && (ev.stage === "complete" || ev.stage === "error")) break;
	}
	return events;
}

function signature(info, endpoint) {
	const ep = info.named_endpoints[endpoint];
	if (!ep) return null;
	const params = ep.parameters.map((p) => `${p.parameter_name ?? p.label}: ${p.python_type?.type} [${p.component}]`);
	const returns = ep.returns.map((r) => r.python_type?.type);
	return `${endpoint}(${params.join(", ")}) -> [${returns.join(", ")}]`;
}

async function simJSON(path) {
	const res = await fetch(opts.url + path);
	assert(res.ok, `GET ${path}: HTTP ${res.status}`);
	return res.json();
}

// simState reads the simulator's /_sim/state snapshot: executions per
// api_name (handler starts) and running (jobs whose handler is running).
async function simState() {
	return simJSON("/_sim/state");
}

// ---------------------------------------------------------------- checks

const EXPECTED_ENDPOINTS = ["/upper", "/count", "/slow", "/counter", "/fail", "/reverse_file"];
// view_api() signatures printed by the probe that captured the real
// Gradio 5.49.1 transcripts (parameter_name: python type [component]).
const EXPECTED_SIGNATURES = [
	"/upper(text: str [Textbox]) -> [str]",
	"/count(n: float [Number]) -> [str]",
	"/slow(seconds: float [Number]) -> [str]",
	"/counter(text: str [Textbox], undefined: undefined [state]) -> [str]",
	"/fail(text: str [Textbox]) -> [str]",
	"/reverse_file(f: filepath [File]) -> [filepath]"
];

async function main() {
	let app = null;

	await check("client_version", () => {
		eq(CLIENT_VERSION, "2.7.0", "@gradio/client version");
		return { client: CLIENT_VERSION, node: process.version };
	});

	await check("connect", async () => {
		app = await connect();
		const c = app.config;
		assert(c, "no config after connect");
		eq(c.protocol, "sse_v3", "config.protocol");
		eq(app.api_prefix, opts.apiPrefix, "api_prefix");
		assert(typeof c.version === "string" && new RegExp(opts.versionRe).test(c.version.trim()), `config.version ${JSON.stringify(c.version)} does not match ${opts.versionRe}`);
		assert(c.connect_heartbeat === true, "config.connect_heartbeat must be true (the app has a gr.State)");
		assert(typeof c.root === "string" && c.root.startsWith("http"), `config.root ${JSON.stringify(c.root)}`);
		assert(app.session_hash && typeof app.session_hash === "string", "no session_hash");
		return { version: c.version, protocol: c.protocol, api_prefix: app.api_prefix, root: c.root };
	});
	if (!app) {
		emit({ name: "remaining", ok: false, detail: "connect failed; no further checks ran" });
		failed++;
		return;
	}

	await check("config/app_id_uint64", async () => {
		// app_id is random 64-bit and overflows JS numbers; check the raw text.
		const text = await (await fetch(opts.url + "/config")).text();
		const m = text.match(/"app_id":\s*(\d+)/);
		assert(m, "config has no integer app_id");
		const id = BigInt(m[1]);
		assert(id >= 0n && id < 1n << 64n, `app_id ${m[1]} is not a uint64`);
		return { app_id: m[1], above_2_53: id > 2n ** 53n };
	});

	await check("view_api", async () => {
		const info = await app.view_api();
		eq(Object.keys(info.named_endpoints), EXPECTED_ENDPOINTS, "named endpoints");
		eq(Object.keys(info.unnamed_endpoints), [], "unnamed endpoints");
		const sigs = EXPECTED_ENDPOINTS.map((e) => signature(info, e));
		eq(sigs, EXPECTED_SIGNATURES, "endpoint signatures");
		return sigs;
	});

	await check("predict/upper", async () => {
		const r = await app.predict("/upper", ["hello gradio"]);
		eq(r.data, ["HELLO GRADIO"], "data");
		return r.data;
	});

	await check("predict/upper_second_call", async () => {
		const r = await app.predict("/upper", ["second call"]);
		eq(r.data, ["SECOND CALL"], "data");
		return r.data;
	});

	await check("predict/upper_unicode", async () => {
		// The captured app is Python: str.upper() applies Unicode special
		// casing (ß -> SS, the ligature ﬁ -> FI), unlike a rune-by-rune upper.
		const r = await app.predict("/upper", ["straße ﬁ héllo ✓ 😀"]);
		eq(r.data, ["STRASSE FI HÉLLO ✓ 😀"], "data (the real app is Python str.upper: ß -> SS, ﬁ -> FI; Go's strings.ToUpper keeps them)");
		return r.data;
	});

	await check("predict/large_payload", async () => {
		// ~100 KB with newlines, quotes and non-ASCII: one SSE data line each way.
		const text = Array.from({ length: 6000 }, (_, i) => `line ${i} "q" é\n`).join("") + "\r\n\u2028end";
		const r = await app.predict("/upper", [text]);
		eq(r.data[0].length, text.toUpperCase().length, "length");
		assert(r.data[0] === text.toUpperCase(), "upper-cased text differs");
		return { chars: text.length };
	});

	await check("predict/by_fn_index", async () => {
		// A number endpoint is the dependency id (fn_index).
		const r = await app.predict(0, ["by index"]);
		eq(r.data, ["BY INDEX"], "data");
		return r.data;
	});

	await check("predict/keyword_args", async () => {
		// Keyword arguments are mapped by /info parameter_name; missing ones
		// take parameter_default when parameter_has_default (count: n=5).
		const a = await app.predict("/upper", { text: "kw" });
		eq(a.data, ["KW"], "upper(text=kw)");
		const b = await app.predict("/count", {});
		eq(b.data, ["0 1 2 3 4"], "count() with the default n=5");
		return [a.data[0], b.data[0]];
	});

	await check("connect/trailing_slash", async () => {
		// The real captures connected to "http://127.0.0.1:7871/".
		const c = await connect(opts.url + "/");
		try {
			const r = await c.predict("/upper", ["slash"]);
			eq(r.data, ["SLASH"], "data");
			return c.config.root;
		} finally {
			c.close();
		}
	});

	await check("reconnect/app_id", async () => {
		// Client.reconnect() compares GET {prefix}/app_id with config.app_id.
		eq(await app.reconnect(), "connected", "reconnect()");
		const res = await fetch(`${opts.url}${app.api_prefix}/app_id`);
		eq(res.status, 200, `GET ${app.api_prefix}/app_id status`);
		const text = await res.text();
		const cfgText = await (await fetch(opts.url + "/config")).text();
		const want = cfgText.match(/"app_id":\s*(\d+)/)[1];
		eq(text.match(/"app_id":\s*(\d+)/)?.[1], want, "app_id digits (exact uint64, not a rounded float)");
		return text;
	});

	await check("predict/count", async () => {
		const r = await app.predict("/count", [4]);
		eq(r.data, ["0 1 2 3"], "data");
		return r.data;
	});

	await check("predict/slow", async () => {
		const r = await app.predict("/slow", [0.05]);
		eq(r.data, ["slept 0.05s"], "data");
		return r.data;
	});

	await check("predict/reverse_file", async () => {
		// Bytes that are not valid UTF-8, so any text decoding on the way shows.
		const payload = Buffer.from([0x68, 0x69, 0x00, 0xff, 0xfe, 0x0a, 0x80, 0x7f, 0x31, 0x32, 0x33]);
		const want = Buffer.from(payload).reverse();
		const r = await app.predict("/reverse_file", [handle_file(payload)]);
		assert(Array.isArray(r.data) && r.data.length === 1, `data ${JSON.stringify(r.data)}`);
		const fd = r.data[0];
		assert(fd && typeof fd === "object", `output is not FileData: ${JSON.stringify(fd)}`);
		eq(Object.keys(fd).sort(), ["is_stream", "meta", "mime_type", "orig_name", "path", "size", "url"], "FileData keys");
		eq(fd.meta, { _type: "gradio.FileData" }, "FileData.meta");
		eq(fd.is_stream, false, "FileData.is_stream");
		eq(fd.size, payload.length, "FileData.size");
		assert(typeof fd.url === "string" && fd.url.includes(`${app.api_prefix}/file=`), `FileData.url ${fd.url}`);
		const res = await fetch(fd.url);
		eq(res.status, 200, `GET ${fd.url} status`);
		const got = Buffer.from(await res.arrayBuffer());
		assert(got.equals(want), `downloaded bytes ${got.toString("hex")}, want reversed ${want.toString("hex")}`);
		return { orig_name: fd.orig_name, size: fd.size, content_type: res.headers.get("content-type") };
	});

	await check("upload/direct", async () => {
		// client.upload_files is what handle_file() uses under the hood; the
		// server must answer a JSON array of server paths, one per part.
		const r = await app.upload_files(app.config.root, [new Blob([Buffer.from("abc")]), new Blob([Buffer.from("defg")])]);
		assert(!r.error, `upload error: ${r.error}`);
		assert(Array.isArray(r.files) && r.files.length === 2, `files ${JSON.stringify(r.files)}`);
		assert(r.files.every((f) => typeof f === "string" && f.length > 0), "paths must be strings");
		assert(r.files[0] !== r.files[1], "two different uploads got the same path");
		return r.files.length;
	});

	await check("state/same_client", async () => {
		const a = await app.predict("/counter", ["a"]);
		eq(a.data, ["1 items: a"], "first call");
		const b = await app.predict("/counter", ["b"]);
		eq(b.data, ["2 items: a, b"], "second call");
		return [a.data[0], b.data[0]];
	});

	await check("state/fresh_client", async () => {
		const other = await connect();
		try {
			assert(other.session_hash !== app.session_hash, "new client reused the session hash");
			const r = await other.predict("/counter", ["c"]);
			eq(r.data, ["1 items: c"], "new client's first call");
			// and the first client's state is untouched
			const again = await app.predict("/counter", ["d"]);
			eq(again.data, ["3 items: a, b, d"], "first client's third call");
			return [r.data[0], again.data[0]];
		} finally {
			other.close();
		}
	});

	await check("state/session_hash_option", async () => {
		// Client.connect(url, {session_hash}) shares gr.State with the first client.
		const twin = await connect(opts.url, { ...EVENTS, session_hash: app.session_hash });
		try {
			const r = await twin.predict("/counter", ["e"]);
			eq(r.data, ["4 items: a, b, d, e"], "same session_hash, other client");
			return r.data[0];
		} finally {
			twin.close();
		}
	});

	await check("error/gr_error", async () => {
		let err = null;
		try {
			await app.predict("/fail", ["boom"]);
		} catch (e) {
			err = e;
		}
		assert(err, "predict(/fail) resolved; want a rejection");
		assert(err instanceof Error, `rejection is not an Error: ${JSON.stringify(err)}`);
		// Gradio 4 sends str(gr.Error), which is repr(message): Python
		// quotes included (real 4.44.1 and the 4.x captures); 5+ the message.
		const msg = "deliberate failure for input 'boom'";
		eq(err.message, String(app.config.version).startsWith("4.") ? `"${msg}"` : msg, "error message");
		eq(err.title, "Error", "error title");
		eq(err.stage, "error", "error stage");
		return { message: err.message, title: err.title, duration: err.duration, visible: err.visible };
	});

	await check("error/client_still_usable", async () => {
		const r = await app.predict("/upper", ["after error"]);
		eq(r.data, ["AFTER ERROR"], "data");
		return r.data;
	});

	await check("submit/count_generator", async () => {
		const job = app.submit("/count", [5]);
		const events = await collect(job);
		const data = events.filter((e) => e.type === "data").map((e) => e.data);
		const want = ["0", "0 1", "0 1 2", "0 1 2 3", "0 1 2 3 4"].map((s) => [s]);
		// @gradio/client fires the final value twice: once for the last
		// process_generating and once for process_completed (as in the real capture).
		eq(data, [...want, want[want.length - 1]], "data events in order");
		const statuses = events.filter((e) => e.type === "status").map((e) => e.stage);
		eq(statuses[statuses.length - 1], "complete", "last status");
		assert(!statuses.includes("error"), `statuses ${statuses}`);
		const generating = statuses.filter((s) => s === "generating").length;
		eq(generating, 5, "generating statuses");
		const lastData = events.map((e) => e.type).lastIndexOf("data");
		const complete = events.findIndex((e) => e.type === "status" && e.stage === "complete");
		assert(lastData < complete, "complete status before the last data event");
		return { statuses };
	});

	await check("submit/multiplexed_one_client", async () => {
		// Several jobs of one client share one /queue/data stream and must each
		// get their own result. A long job is kept running meanwhile so that
		// the server cannot send close_stream between the joins: with an empty
		// pending set it would, and @gradio/client 2.7.0 then loses the calls
		// whose join answered before it processed close_stream (its known
		// close race, PROTOCOL.md section 4.8), a client bug this check is not about.
		const mclient = await connect();
		try {
			const long = mclient.submit("/slow", [LONG]);
			await waitStarted(long);
			const words = ["x", "yy", "zzz", "wwww"];
			const rs = await Promise.all(words.map((w) => mclient.predict("/upper", [w])));
			eq(rs.map((r) => r.data[0]), words.map((w) => w.toUpperCase()), "results");
			await long.cancel();
			await collect(long);
			return rs.length;
		} finally {
			mclient.close();
		}
	});

	await check("cancel/running_job", async () => {
		const cclient = await connect();
		try {
			const before = opts.sim ? await simState() : null;
			const job = cclient.submit("/slow", [LONG]);
			await waitStarted(job);
			let during = null;
			if (opts.sim) {
				during = await simState();
				eq((during.executions.slow ?? 0) - (before.executions.slow ?? 0), 1, "slow handler starts");
				assert(during.running >= 1, `simulator reports ${during.running} running jobs while slow runs`);
			}
			await job.cancel();
			const rest = await collect(job);
			const results = rest.filter((e) => e.type === "data" && Array.isArray(e.data) && e.data.some((d) => typeof d === "string" && d.startsWith("slept")));
			eq(results.length, 0, "result events after cancel");
			const stages = rest.filter((e) => e.type === "status").map((e) => e.stage);
			// collect() returned, so the iterator ended; it must end on a terminal status.
			assert(stages.length > 0 && ["complete", "error"].includes(stages[stages.length - 1]), `stages after cancel ${JSON.stringify(stages)}`);
			let server = "not checked (not the simulator)";
			if (opts.sim) {
				// The handler must really stop: the simulator's running count drops to 0.
				const after = await waitIdle();
				server = { running_during: during.running, running_after: after.running };
			}
			// the client is still usable after a cancel
			const r = await cclient.predict("/upper", ["after cancel"]);
			eq(r.data, ["AFTER CANCEL"], "call after cancel");
			const last = rest.filter((e) => e.type === "status").pop();
			return { stages_after_cancel: stages, last_message: last?.message ?? null, server };
		} finally {
			cclient.close();
		}
	});

	await check("cancel/queued_job", async () => {
		// slow has Gradio's default concurrency_limit of 1: a second slow job
		// waits in the queue; cancelling it ends it for the client. Real
		// Gradio (4.x-6.x) answers the /cancel of a queued event but keeps
		// the event queued: it runs once the slot frees, for nobody, unless
		// the session's stream was dropped first, which @gradio/client 2.7.0
		// does not do (it reads the synthetic completion and close_stream).
		// So the queued job here is short (QUEUED_SECONDS), and the check
		// waits for the app to be idle again before the next one.
		const sticky = opts.stickyHeader ? { ...EVENTS, headers: opts.stickyHeader } : EVENTS;
		const a = await connect(opts.url, sticky);
		const b = await connect(opts.url, sticky);
		try {
			const before = opts.sim ? await simState() : null;
			step("the long job starts");
			const running = a.submit("/slow", [LONG]);
			await waitStarted(running);
			step("the second job's first estimation");
			const queued = b.submit("/slow", [QUEUED_SECONDS]);
			// wait for its first estimation (it is in the queue)
			const seen = [];
			for (;;) {
				const { value: ev, done } = await queued.next();
				if (done) throw new Error(`queued job ended early: ${JSON.stringify(seen)}`);
				seen.push(ev.type === "status" ? ev.stage : ev.type);
				if (ev.type === "status" && ev.original_msg === "process_starts") throw new Error("second slow job started while the first runs (concurrency_limit 1)");
				if (ev.type === "status" && ev.stage === "pending" && typeof ev.position === "number") break;
			}
			step("cancel of the queued job");
			await queued.cancel();
			step("the queued job's events after its cancel");
			const rest = await collect(queued);
			const stages = rest.filter((e) => e.type === "status").map((e) => e.stage);
			assert(stages.length > 0 && ["complete", "error"].includes(stages[stages.length - 1]), `stages after cancel ${JSON.stringify(stages)}`);
			assert(!rest.some((e) => e.type === "status" && e.original_msg === "process_starts"), "cancelled queued job started");
			step("cancel of the long job");
			await running.cancel();
			step("the long job's events after its cancel");
			await collect(running);
			let server;
			if (opts.sim) {
				step("the app idle again");
				const after = await waitIdle();
				// Gradio 6 takes a cancelled event out of its queue (6.25.0).
				const v6 = String(app.config.version).startsWith("6.");
				eq((after.executions.slow ?? 0) - (before.executions.slow ?? 0), v6 ? 1 : 2, v6 ? "slow handler starts (the cancelled queued job must never start on Gradio 6)" : "slow handler starts (the running job, then the cancelled queued one, as on real Gradio 4/5)");
				server = { slow_starts: after.executions.slow - (before.executions.slow ?? 0) };
			} else {
				// A probe call waits behind the cancelled job if the app kept it.
				const t0 = Date.now();
				await app.predict("/slow", [0.01]);
				server = { probe_ms: Date.now() - t0, cancelled_queued_job_ran: Date.now() - t0 >= QUEUED_SECONDS * 500 };
			}
			return { seen, stages_after_cancel: stages, server };
		} finally {
			a.close();
			b.close();
		}
	});

	await check("fault/queue_full", async () => {
		if (!opts.sim) throw new Skip("needs the simulator's queue_full knob");
		await simPost("/_sim/faults", { queue_full: true });
		try {
			let err = null;
			try {
				await app.predict("/upper", ["full"]);
			} catch (e) {
				err = e;
			}
			assert(err, "predict resolved while the queue is full");
			// 503 on queue/join: @gradio/client shows its QUEUE_FULL_MSG.
			eq(err.message, "This application is currently busy. Please try again. ", "error message");
		} finally {
			await simPost("/_sim/faults", { queue_full: false });
		}
		const r = await app.predict("/upper", ["not full"]);
		eq(r.data, ["NOT FULL"], "call after the queue drained");
		return "503 -> busy message";
	});

	await authChecks();

	await check("space_id/hub", async () => {
		if (!opts.hubURL || !opts.space) throw new Skip("no Hub emulation given (--hub-url, --space)");
		const c = await connect(opts.space);
		try {
			eq(hubLookups.filter((u) => u.endsWith(`/api/spaces/${opts.space}/host`)).length >= 1, true, "Hub host look-up made");
			eq((await c.predict("/upper", ["via hub"])).data, ["VIA HUB"], "upper through the Space id");
			return { lookups: hubLookups, root: c.config.root };
		} finally {
			c.close();
		}
	});

	await check("space_id/private", async () => {
		if (!opts.hubURL || !opts.privateSpace) throw new Skip("no private Space given (--private-space, --hf-token)");
		let err = null;
		try {
			(await Client.connect(opts.privateSpace, EVENTS)).close();
		} catch (e) {
			err = e;
		}
		assert(err && /401/.test(err.message), `connect without a token: ${err ? err.message : "succeeded"}`);
		const c = await connect(opts.privateSpace, { ...EVENTS, hf_token: opts.hfToken });
		try {
			eq((await c.predict("/upper", ["private"])).data, ["PRIVATE"], "upper with the token");
			return { without_token: err.message.slice(0, 80) };
		} finally {
			c.close();
		}
	});

	await check("space_id/wake_sleeping", async () => {
		// With a status_callback, the client polls the Hub's
		// /api/spaces/{id} (runtime.stage) until the Space runs, then connects.
		if (!opts.hubURL || !opts.sleepingSpace) throw new Skip("no sleeping Space given (--sleeping-space)");
		const statuses = [];
		const c = await connect(opts.sleepingSpace, { ...EVENTS, status_callback: (st) => statuses.push(st.status) });
		try {
			// Whether "sleeping" shows up first depends on how fast the Space
			// wakes after the host look-up; only the end state is asserted.
			assert(statuses.length > 0, "status_callback never called (Hub /api/spaces/{id} unusable?)");
			eq(statuses[statuses.length - 1], "running", "last status");
			eq((await c.predict("/upper", ["awake"])).data, ["AWAKE"], "upper after the wake-up");
			return { statuses };
		} finally {
			c.close();
		}
	});

	await check("space_id/not_found", async () => {
		if (!opts.hubURL) throw new Skip("no Hub emulation given (--hub-url)");
		let err = null;
		try {
			(await Client.connect("gradiopool-conformance/no-such-space", EVENTS)).close();
		} catch (e) {
			err = e;
		}
		assert(err, "connect to an unknown Space succeeded");
		assert(/gradiopool-conformance\/no-such-space/.test(err.message) && /404/.test(err.message), `error ${err.message}`);
		return err.message;
	});

	if (opts.wireOut) {
		await check("wire/record", async () => {
			const rec = await recordWire();
			writeFileSync(opts.wireOut, JSON.stringify(rec, null, 1));
			return { exchanges: rec.exchanges.length, calls: rec.calls.length, file: opts.wireOut };
		});
	}

	app.close();
}

// LONG is the duration of the slow calls the checks cancel while they run.
// A real Gradio app frees the endpoint at once on /cancel but its worker
// thread sleeps on, so against real apps it is kept short.
const LONG = opts.sim ? 600 : 30;
// QUEUED_SECONDS is the slow call cancelled while queued: real Gradio runs
// it anyway (see cancel/queued_job), so it must end soon.
const QUEUED_SECONDS = 2;

// waitIdle polls the simulator until no job runs. It only ends early; the
// caller's hang guard bounds it.
async function waitIdle() {
	for (;;) {
		const st = await simState();
		if (st.running === 0) return st;
		await new Promise((r) => setTimeout(r, 20));
	}
}

// waitStarted consumes a job's events until the server reports
// process_starts for it (the handler is running).
async function waitStarted(job) {
	const seen = [];
	for (;;) {
		const { value: ev, done } = await job.next();
		if (done) throw new Error(`job ended before process_starts: ${JSON.stringify(seen)}`);
		seen.push(ev.type === "status" ? ev.stage : ev.type);
		if (ev.type === "status" && ev.original_msg === "process_starts") return;
		if (ev.type === "status" && (ev.stage === "complete" || ev.stage === "error")) {
			throw new Error(`job ended before process_starts: ${JSON.stringify(seen)}`);
		}
	}
}

async function simPost(path, body) {
	const res = await fetch(opts.url + path, {
		method: "POST",
		headers: { "Content-Type": "application/json" },
		body: JSON.stringify(body)
	});
	const text = await res.text();
	assert(res.ok, `POST ${path}: HTTP ${res.status} ${text}`);
	return JSON.parse(text);
}

// authChecks logs in to the auth-protected copy of the app (Gradio's
// launch(auth=...)): POST /login sets cookies that the client then sends on
// every request and stream.
async function authChecks() {
	const skip = () => {
		throw new Skip("no auth-protected app given (--auth-url)");
	};
	const [user, pass] = opts.auth ? [opts.auth.slice(0, opts.auth.indexOf(":")), opts.auth.slice(opts.auth.indexOf(":") + 1)] : [];
	const rejects = async (p) => {
		try {
			const c = await p;
			c.close();
		} catch (e) {
			return e;
		}
		throw new Error("connect succeeded");
	};
	await check("auth/no_credentials", async () => {
		if (!opts.authURL) skip();
		// 401 {"detail":{"error":"Not authenticated","auth_message":null}} on /config.
		const e = await rejects(Client.connect(opts.authURL, EVENTS));
		eq(e.message, "Login credentials are required to access this space.", "error message");
		return e.message;
	});
	await check("auth/wrong_password", async () => {
		if (!opts.authURL) skip();
		// Real Gradio answers 400 {"detail":"Incorrect credentials."} (not 401),
		// which @gradio/client 2.7.0 reports as a metadata error.
		const e = await rejects(Client.connect(opts.authURL, { ...EVENTS, auth: [user, pass + "-wrong"] }));
		eq(e.message, "Space metadata could not be loaded. ", "error message");
		return e.message;
	});
	await check("auth/login", async () => {
		if (!opts.authURL) skip();
		const c = await connect(opts.authURL, { ...EVENTS, auth: [user, pass] });
		try {
			assert(c.cookies && /access-token/.test(c.cookies), `cookies ${c.cookies}`);
			eq((await c.predict("/upper", ["secret"])).data, ["SECRET"], "upper");
			eq((await c.predict("/counter", ["a"])).data, ["1 items: a"], "counter 1");
			eq((await c.predict("/counter", ["b"])).data, ["2 items: a, b"], "counter 2");
			const events = await collect(c.submit("/count", [3]));
			eq(events.filter((e) => e.type === "data").map((e) => e.data[0]), ["0", "0 1", "0 1 2", "0 1 2"], "count stream");
			const payload = Buffer.from("locked file");
			const r = await c.predict("/reverse_file", [handle_file(payload)]);
			const url = r.data[0].url;
			const anon = await fetch(url);
			eq(anon.status, 401, `GET ${url} without the cookie`);
			const res = await c.fetch(url);
			eq(res.status, 200, `GET ${url} with the cookie`);
			const got = Buffer.from(await res.arrayBuffer());
			assert(got.equals(Buffer.from(payload).reverse()), `downloaded ${got}`);
			return { cookies: c.cookies.split("; ").map((x) => x.split("=")[0]) };
		} finally {
			c.close();
		}
	});
}

// ---------------------------------------------------------------- wire recorder

// recordWire starts a logging reverse proxy in front of the app, runs the
// scenario of the real all-endpoints capture through it with a fresh client,
// and returns what crossed the wire. The proxy keeps the Host header, so
// Gradio computes config.root as the proxy's address, exactly like the proxy
// that captured the real transcripts.
async function recordWire() {
	const target = new URL(opts.url);
	const exchanges = [];
	const server = http.createServer((req, res) => {
		const ex = {
			seq: exchanges.length,
			method: req.method,
			target: req.url,
			req_headers: req.headers,
			req_body: "",
			status: 0,
			res_headers: {},
			res_body: "",
			sse: [],
			ended: false
		};
		exchanges.push(ex);
		const chunks = [];
		req.on("data", (c) => chunks.push(c));
		const up = http.request(
			{ host: target.hostname, port: target.port || 80, method: req.method, path: req.url, headers: req.headers },
			(ures) => {
				ex.status = ures.statusCode;
				ex.res_headers = ures.headers;
				res.writeHead(ures.statusCode, ures.headers);
				const isSSE = String(ures.headers["content-type"] || "").startsWith("text/event-stream");
				let buf = "";
				ures.on("data", (c) => {
					if (!res.destroyed) res.write(c);
					if (isSSE) {
						buf += c.toString("utf8");
						let i;
						while ((i = buf.indexOf("\n")) >= 0) {
							const line = buf.slice(0, i).replace(/\r$/, "");
							buf = buf.slice(i + 1);
							if (line.startsWith("data:")) ex.sse.push(line.slice(5).replace(/^ /, ""));
						}
					} else if (ex.res_body.length < 65536) {
						ex.res_body += c.toString("latin1");
					}
				});
				ures.on("end", () => {
					ex.ended = true;
					res.end();
				});
				ures.on("error", () => res.destroy());
			}
		);
		up.on("error", (e) => {
			ex.error = String(e);
			res.destroy();
		});
		req.on("end", () => {
			const body = Buffer.concat(chunks);
			ex.req_body = body.toString("latin1").slice(0, 65536);
			up.end(body);
		});
		// The client aborts its data stream as soon as it reads close_stream;
		// the server ends the response right after, so let that end arrive
		// (it is what streams_end_with_close_stream checks). Any other client
		// disconnect is passed on to the server.
		res.on("close", () => {
			if (!ex.ended && !ex.sse.some((m) => m.includes('"msg":"close_stream"'))) up.destroy();
		});
	});
	await new Promise((r) => server.listen(0, "127.0.0.1", r));
	const proxyURL = `http://127.0.0.1:${server.address().port}`;
	const calls = [];
	let client = null;
	try {
		client = await connect(proxyURL);
		await client.view_api();
		const p = async (ep, args) => {
			process.stderr.write(`wire/record: predict ${ep}\n`);
			try {
				return { ok: true, data: (await client.predict(ep, args)).data };
			} catch (e) {
				return { ok: false, error: e.message };
			}
		};
		calls.push({ op: "predict", endpoint: "/upper", result: await p("/upper", ["hello gradio"]) });
		calls.push({ op: "predict", endpoint: "/upper", result: await p("/upper", ["second call"]) });
		calls.push({ op: "predict", endpoint: "/count", result: await p("/count", [4]) });
		calls.push({ op: "predict", endpoint: "/slow", result: await p("/slow", [0.05]) });
		calls.push({ op: "predict", endpoint: "/counter", result: await p("/counter", ["apple"]) });
		calls.push({ op: "predict", endpoint: "/counter", result: await p("/counter", ["banana"]) });
		calls.push({ op: "predict", endpoint: "/fail", result: await p("/fail", ["boom"]) });
		const rf = await p("/reverse_file", [handle_file(new Blob([Buffer.from("hello file payload 123\n")]))]);
		calls.push({ op: "predict", endpoint: "/reverse_file", result: rf });
		if (rf.ok && rf.data[0] && rf.data[0].url) {
			const res = await fetch(rf.data[0].url);
			calls.push({ op: "download", status: res.status, body: Buffer.from(await res.arrayBuffer()).toString("latin1") });
		}
		const events = await collect(client.submit("/count", [5]));
		calls.push({ op: "submit", endpoint: "/count", events: events.map((e) => (e.type === "data" ? { type: "data", data: e.data } : { type: e.type, stage: e.stage })) });
		// Wait until every stream the proxy saw (except the long-lived
		// heartbeat) has ended, so the record is complete.
		for (let i = 0; i < 500; i++) {
			if (exchanges.every((e) => e.ended || e.target.includes("/heartbeat/"))) break;
			await new Promise((r) => setTimeout(r, 10));
		}
	} finally {
		if (client) client.close();
		server.closeAllConnections();
		server.close();
	}
	return {
		client_version: CLIENT_VERSION,
		proxy_url: proxyURL,
		app_url: opts.url,
		session_hash: client ? client.session_hash : null,
		config_root: client && client.config ? client.config.root : null,
		exchanges,
		calls
	};
}

main()
	.catch((e) => {
		failed++;
		emit({ name: "harness", ok: false, detail: String(e && e.stack ? e.stack : e) });
	})
	.finally(() => {
		// The client keeps its heartbeat stream open forever; exit explicitly.
		process.exit(failed > 0 ? 1 : 0);
	});
