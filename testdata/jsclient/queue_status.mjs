#!/usr/bin/env node
// One official @gradio/client call through the gradiopool gateway's front
// door, printing the status events the client shows, for
// gateway/frontdoor_queue_test.go (the gateway's queue shown as Gradio's).
//
// Usage: node queue_status.mjs URL ENDPOINT ARG
//
// Prints one JSON line per status event
// {"status":{"stage":...,"queue":...,"position":...,"size":...,"eta":...,"message":...}},
// {"data":[...]} for the result, then {"end":true}; exits 0 unless the
// harness itself broke.

import { Client } from "@gradio/client";

console.log = console.error;
console.info = console.error;

const [url, endpoint, arg] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

async function main() {
	const c = await Client.connect(url, { events: ["data", "status"] });
	try {
		const job = c.submit(endpoint, [arg]);
		for await (const m of job) {
			if (m.type === "data") {
				out({ data: m.data });
			}
			if (m.type !== "status") {
				continue;
			}
			const { stage, queue, position, size, eta, message } = m;
			out({ status: { stage, queue, position, size, eta, message } });
			if (stage === "complete" || stage === "error") {
				break;
			}
		}
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
