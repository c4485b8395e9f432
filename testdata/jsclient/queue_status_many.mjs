#!/usr/bin/env node
// Several calls of ONE official @gradio/client (one session) through the
// gradiopool gateway's front door, printing the status events the client
// shows per call, for gateway/frontdoor_queue_wait_test.go (every waiting
// join of a session shown its own place in the gateway's queue).
//
// Usage: node queue_status_many.mjs [--user=EMAIL] URL ENDPOINT ARG...
//
// One call per ARG, each submitted once the one before is shown waiting
// (a status with a position) or has ended, so that the joins reach the
// gateway in order. --user sends X-Gradiopool-User (a signed-in user).
// Prints one JSON line per status event
// {"call":i,"status":{"stage":...,"queue":...,"position":...,"size":...,"eta":...,"message":...}},
// {"call":i,"data":[...]} for a result, then {"end":true}; exits 0 unless
// the harness itself broke.

import { Client } from "@gradio/client";

console.log = console.error;
console.info = console.error;

let args = process.argv.slice(2);
const headers = {};
if (args[0] && args[0].startsWith("--user=")) {
	headers["X-Gradiopool-User"] = args[0].slice("--user=".length);
	args = args.slice(1);
}
const [url, endpoint, ...inputs] = args;
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

async function follow(job, i, shown) {
	for await (const m of job) {
		if (m.type === "data") {
			out({ call: i, data: m.data });
		}
		if (m.type !== "status") {
			continue;
		}
		const { stage, queue, position, size, eta, message } = m;
		out({ call: i, status: { stage, queue, position, size, eta, message } });
		if (position !== undefined && position !== null) {
			shown();
		}
		if (stage === "complete" || stage === "error") {
			break;
		}
	}
	shown();
}

async function main() {
	const c = await Client.connect(url, { events: ["data", "status"], headers });
	try {
		const calls = [];
		for (const [i, arg] of inputs.entries()) {
			let shown;
			const waiting = new Promise((resolve) => (shown = resolve));
			calls.push(follow(c.submit(endpoint, [arg]), i, shown));
			await waiting;
		}
		await Promise.all(calls);
	} finally {
		out({ end: true });
		c.close();
	}
}

main().then(
	() => process.exit(0),
	(e) => {
		process.stderr.write(String(e && e.stack ? e.stack : e) + "\n");
		process.exit(1);
	},
);
