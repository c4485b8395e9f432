#!/usr/bin/env node
// Rounds of one official @gradio/client's concurrent calls through the
// gradiopool gateway's front door, for the gateway's hang tests.
//
// Usage: node concurrent_calls.mjs URL MODE ROUNDS [--timeout-ms N]
//
// MODE multiplexed: each round one client submits a long /slow call, waits
// for it to start, makes four /upper calls at once beside it, then cancels
// the long one (the conformance suite's submit/multiplexed_one_client).
// MODE many: each round one client makes twelve /upper calls at once with
// nothing else running, then four workers of that client make ten calls
// each, one after another, so that the client's stream closes and reopens
// between them while other joins are on their way (the close race: a join
// answered around the stream's close_stream). MODE burst: only the twelve
// calls at once.
//
// One JSON line per round: {"name":"round i","ok":bool,"detail":...}; a
// round that gets no answer within the hang guard fails with where it hung,
// and no round runs after a failed one. The exit status is 0 unless the
// harness itself broke.

import { Client } from "@gradio/client";

console.log = console.error;
console.info = console.error;

const args = process.argv.slice(2);
const [url, mode, roundsArg] = args;
const rounds = Number(roundsArg || 1);
let timeoutMs = 30000;
for (let i = 3; i < args.length; i++) {
	if (args[i] === "--timeout-ms") timeoutMs = Number(args[++i]);
}
if (!url || !["multiplexed", "many", "burst"].includes(mode) || !(rounds > 0)) {
	process.stderr.write("usage: node concurrent_calls.mjs URL multiplexed|many|burst ROUNDS [--timeout-ms N]\n");
	process.exit(2);
}

const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

function guard(promise, what) {
	let timer;
	return Promise.race([
		promise,
		new Promise((_, reject) => {
			timer = setTimeout(() => reject(new Error(`${what()}: no answer after ${timeoutMs} ms (hang guard)`)), timeoutMs);
		})
	]).finally(() => clearTimeout(timer));
}

async function waitStarted(job) {
	for await (const ev of job) {
		if (ev.type === "status" && (ev.stage === "generating" || ev.stage === "pending" && ev.position === 0)) return;
		if (ev.type === "status" && ev.stage === "error") throw new Error("long call failed: " + ev.message);
		if (ev.type === "status" && ev.stage === "pending") continue;
		if (ev.type === "status" && ev.stage === "complete") return;
	}
}

async function drain(job) {
	for await (const _ of job) {
		// the iterator ends at the job's last status
	}
}

// clientState is what the client holds when a round hangs: whether it
// believes its stream open, the calls it waits for, and the messages it
// keeps for calls it has no answer of yet.
function clientState(client) {
	if (!client) return "no client";
	return JSON.stringify({
		session: client.session_hash,
		stream_open: client.stream_status && client.stream_status.open,
		waiting_for: Object.keys(client.event_callbacks || {}),
		unclosed: [...(client.unclosed_events || [])],
		kept_for_unknown: Object.keys(client.pending_stream_messages || {})
	});
}

async function round(i) {
	let at = "connect";
	let client;
	const work = (async () => {
		client = await Client.connect(url, { events: ["data", "status"] });
		try {
			if (mode === "multiplexed") {
				at = "long call";
				const long = client.submit("/slow", [30]);
				await waitStarted(long);
				at = "four calls beside the long one";
				const words = ["x", "yy", "zzz", "wwww"];
				const rs = await Promise.all(words.map((w) => client.predict("/upper", [w + i])));
				const got = rs.map((r) => r.data[0]);
				const want = words.map((w) => (w + i).toUpperCase());
				if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`results ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
				at = "cancel of the long call";
				await long.cancel();
				await drain(long);
				return rs.length;
			}
			at = "twelve calls at once";
			const words = Array.from({ length: 12 }, (_, k) => `w${i}-${k}`);
			const rs = await Promise.all(words.map((w) => client.predict("/upper", [w])));
			const got = rs.map((r) => r.data[0]);
			const want = words.map((w) => w.toUpperCase());
			if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`results ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
			if (mode === "burst") return rs.length;
			at = "four workers' calls one after another";
			const worker = async (k) => {
				for (let j = 0; j < 10; j++) {
					const w = `v${i}-${k}-${j}`;
					const r = await client.predict("/upper", [w]);
					if (r.data[0] !== w.toUpperCase()) throw new Error(`worker ${k} call ${j}: ${JSON.stringify(r.data)}`);
				}
			};
			await Promise.all([0, 1, 2, 3].map(worker));
			return rs.length + 40;
		} finally {
			client.close();
		}
	})();
	try {
		const n = await guard(work, () => `round ${i} (at: ${at}; client: ${clientState(client)})`);
		out({ name: `round ${i}`, ok: true, detail: n });
		return true;
	} catch (e) {
		out({ name: `round ${i}`, ok: false, detail: String(e && e.message ? e.message : e) });
		return false;
	}
}

for (let i = 0; i < rounds; i++) {
	if (!(await round(i))) break;
}
process.exit(0);
