#!/usr/bin/env node
// Several concurrent official @gradio/client sessions through the gradiopool
// gateway's Gradio front door, for gateway/frontdoor_test.go.
//
// Usage: node frontdoor_sessions.mjs URL N
//
// Phase 1: N clients connect at once and each calls /counter three times
// (its gr.State must count 1, 2, 3 with its own items only). The script then
// prints {"phase":1,...} and waits for a line on stdin (the test kills a
// replica meanwhile). Phase 2: every old client calls /counter once more
// (state intact: 4 items; or moved off the killed replica: 1 item), and N
// new clients connect and call /counter twice. Each result is printed; the
// exit status is 0 unless the harness itself broke.

import { Client } from "@gradio/client";
import { createInterface } from "node:readline";

console.log = console.error;
console.info = console.error;

const [url, nArg] = process.argv.slice(2);
const n = Number(nArg || 6);
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

async function call(c, text) {
	try {
		return { ok: true, data: (await c.predict("/counter", [text])).data[0] };
	} catch (e) {
		return { ok: false, error: String(e && e.message ? e.message : e) };
	}
}

async function main() {
	const olds = await Promise.all(Array.from({ length: n }, () => Client.connect(url)));
	const phase1 = await Promise.all(
		olds.map(async (c, i) => {
			const rs = [];
			for (const k of ["a", "b", "c"]) rs.push(await call(c, `o${i}${k}`));
			return { client: i, session: c.session_hash, results: rs };
		})
	);
	out({ phase: 1, clients: phase1 });
	const rl = createInterface({ input: process.stdin });
	await new Promise((resolve) => rl.once("line", resolve));
	rl.close();
	const again = await Promise.all(olds.map(async (c, i) => ({ client: i, result: await call(c, `o${i}d`) })));
	const news = await Promise.all(
		Array.from({ length: n }, async (_, i) => {
			let c;
			try {
				c = await Client.connect(url);
			} catch (e) {
				return { client: i, connect_error: String(e.message || e) };
			}
			const rs = [await call(c, `n${i}a`), await call(c, `n${i}b`)];
			c.close();
			return { client: i, results: rs };
		})
	);
	out({ phase: 2, old: again, new: news });
	for (const c of olds) c.close();
}

main()
	.catch((e) => {
		out({ harness_error: String(e && e.stack ? e.stack : e) });
		process.exitCode = 1;
	})
	.finally(() => setTimeout(() => process.exit(process.exitCode ?? 0), 10));
