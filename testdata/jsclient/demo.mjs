#!/usr/bin/env node
// One official @gradio/client session through the gradiopool gateway's
// Gradio front door, for `gradiopool demo` (internal/demo).
//
// Usage: node demo.mjs URL [--user EMAIL] [--state-calls 3]
//
// It connects to URL exactly as an app connects to a Space (the only change
// is the URL; --user is sent as X-Gradiopool-User through the client's
// `headers` option), calls predict("/upper") once, then
// predict("/counter") --state-calls times: the app's gr.State must count
// every item of this client and no other. It prints one JSON object on
// stdout and exits 0 (1 when the harness itself broke).

import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { Client } from "@gradio/client";

console.log = console.error; // stdout carries only the result
console.info = console.error;

const args = process.argv.slice(2);
let url = "";
let user = "";
let stateCalls = 3;
for (let i = 0; i < args.length; i++) {
	if (args[i] === "--user") user = args[++i] || "";
	else if (args[i] === "--state-calls") stateCalls = Number(args[++i]);
	else url = args[i];
}
if (!url || !Number.isInteger(stateCalls) || stateCalls < 1) {
	process.stderr.write("usage: node demo.mjs URL [--user EMAIL] [--state-calls N]\n");
	process.exit(2);
}

const version = JSON.parse(readFileSync(new URL("./node_modules/@gradio/client/package.json", import.meta.url))).version;
const out = { client_version: version, node: process.version, state: [] };
const ms = (t0) => Math.round((performance.now() - t0) * 100) / 100;

async function main() {
	let t0 = performance.now();
	const c = await Client.connect(url, user ? { headers: { "X-Gradiopool-User": user } } : {});
	out.connect_ms = ms(t0);
	out.session_hash_prefix = String(c.session_hash || "").slice(0, 4);
	try {
		t0 = performance.now();
		const r = await c.predict("/upper", ["hello from the official JS client"]);
		out.predict_ms = ms(t0);
		out.predict_output = r.data[0];
		const items = [];
		for (let k = 0; k < stateCalls; k++) {
			items.push(`js${k + 1}`);
			t0 = performance.now();
			const s = await c.predict("/counter", [items[k]]);
			const want = `${items.length} items: ${items.join(", ")}`;
			out.state.push({ ms: ms(t0), got: s.data[0], want });
		}
		out.state_ok = out.state.every((s) => s.got === s.want);
	} catch (e) {
		out.error = String(e && e.message ? e.message : e);
	} finally {
		c.close();
	}
}

main()
	.catch((e) => {
		out.error = String(e && e.message ? e.message : e);
	})
	.finally(() => {
		process.stdout.write(JSON.stringify(out) + "\n");
		// The client keeps its heartbeat stream open after close().
		setTimeout(() => process.exit(0), 10);
	});
