#!/usr/bin/env node
// One official @gradio/client call through the gradiopool gateway's front
// door while the gateway drains, for gateway/drain_frontdoor_test.go.
//
// Usage: node drain_call.mjs URL ENDPOINT
//
// Prints {"connected":true} once connected (the test may start the drain
// then), then one JSON line {"ok":true,"data":[...]} or
// {"ok":false,"error":"..."} when the call settles; exits 0 unless the
// harness itself broke.

import { Client } from "@gradio/client";

console.log = console.error;
console.info = console.error;

const [url, endpoint] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

async function main() {
	const c = await Client.connect(url);
	out({ connected: true });
	try {
		const r = await c.predict(endpoint, ["x"]);
		out({ ok: true, data: r.data });
	} catch (e) {
		out({ ok: false, error: String(e && e.message ? e.message : e) });
	} finally {
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
