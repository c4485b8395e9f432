#!/usr/bin/env node
// Connect cost and call latency of the official @gradio/client against one
// URL (a Gradio app, or the gradiopool gateway's Gradio front door), for the
// "frontdoor" section of gradiopool's benchmark report (bench/frontdoor.go).
//
// Usage:
//   node frontdoor_bench.mjs URL [--endpoint /upper] [--args '["hello"]']
//                                [--per-call 10] [--warmup 10] [--calls 200]
//                                [--call-timeout-ms 30000] [--concurrent N]
//
// It measures, in this order, one call at a time:
//   - connect per call: --per-call times Client.connect(URL), one predict(),
//     close(): what an app that connects for every request pays; the
//     connect alone and connect + predict are both reported;
//   - warm: one connected client, --warmup untimed calls, then --calls timed
//     predict() calls.
// With --concurrent N it measures instead one shared connected client
// (as a Next.js server keeps one for its anonymous traffic): --warmup
// untimed calls, then --calls predict() calls with N in flight at a time;
// it reports calls/s over the timed calls and their latencies
// ("concurrent").
// Latencies are in ms (nearest rank). It prints one JSON object on stdout
// and exits 0 (1 if every call failed).

import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { Client } from "@gradio/client";

console.log = console.error; // stdout carries only the result
console.info = console.error;

function die(msg) {
	process.stderr.write(`frontdoor_bench.mjs: ${msg}\n`);
	process.exit(2);
}

function parseArgs(argv) {
	const o = { url: "", endpoint: "/upper", args: ["hello"], perCall: 10, warmup: 10, calls: 200, callTimeoutMs: 30000, concurrent: 0 };
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const v = () => (i + 1 < argv.length ? argv[++i] : die(`${a} needs a value`));
		const int = (s, min) => {
			const n = Number(s);
			if (!Number.isInteger(n) || n < min) die(`${a}: want an integer >= ${min}, got ${s}`);
			return n;
		};
		if (a === "--endpoint") o.endpoint = v();
		else if (a === "--args") o.args = JSON.parse(v());
		else if (a === "--per-call") o.perCall = int(v(), 1);
		else if (a === "--warmup") o.warmup = int(v(), 0);
		else if (a === "--calls") o.calls = int(v(), 1);
		else if (a === "--call-timeout-ms") o.callTimeoutMs = int(v(), 1);
		else if (a === "--concurrent") o.concurrent = int(v(), 1);
		else if (a.startsWith("--")) die(`unknown flag ${a}`);
		else o.url = a;
	}
	if (!o.url) die("missing URL");
	if (!Array.isArray(o.args)) die("--args must be a JSON array");
	return o;
}

function summary(xs) {
	const s = [...xs].sort((a, b) => a - b);
	const at = (p) => (s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))] : null);
	const r = (x) => (x === null ? null : Math.round(x * 1000) / 1000);
	return {
		n: s.length,
		first: r(xs.length ? xs[0] : null),
		p50: r(at(0.5)),
		p95: r(at(0.95)),
		p99: r(at(0.99)),
		mean: r(s.length ? s.reduce((a, b) => a + b, 0) / s.length : null),
		max: r(s.length ? s[s.length - 1] : null)
	};
}

function withTimeout(p, ms) {
	let t;
	return Promise.race([p, new Promise((_, rej) => (t = setTimeout(() => rej(new Error(`no answer within ${ms} ms`)), ms)))]).finally(() =>
		clearTimeout(t)
	);
}

async function main() {
	const o = parseArgs(process.argv.slice(2));
	const version = JSON.parse(readFileSync(new URL("./node_modules/@gradio/client/package.json", import.meta.url))).version;
	const out = { tool: "@gradio/client", client_version: version, node: process.version, url: o.url, errors: 0, first_error: null };
	const fail = (e) => {
		out.errors++;
		if (!out.first_error) out.first_error = String(e && e.message ? e.message : e);
	};

	if (o.concurrent > 0) {
		await concurrent(o, out, fail);
		process.stdout.write(JSON.stringify(out) + "\n");
		if (!out.concurrent || out.concurrent.latency_ms.n === 0) process.exitCode = 1;
		return;
	}

	const connects = [];
	const perCall = [];
	for (let i = 0; i < o.perCall; i++) {
		const t0 = performance.now();
		let c;
		try {
			c = await withTimeout(Client.connect(o.url), o.callTimeoutMs);
			const t1 = performance.now();
			await withTimeout(c.predict(o.endpoint, o.args), o.callTimeoutMs);
			connects.push(t1 - t0);
			perCall.push(performance.now() - t0);
		} catch (e) {
			fail(e);
		} finally {
			if (c) c.close();
		}
	}
	out.connect_ms = summary(connects);
	out.per_call_ms = summary(perCall);

	const warm = [];
	try {
		const c = await withTimeout(Client.connect(o.url), o.callTimeoutMs);
		for (let i = 0; i < o.warmup; i++) {
			try {
				await withTimeout(c.predict(o.endpoint, o.args), o.callTimeoutMs);
			} catch (e) {
				fail(e);
			}
		}
		for (let i = 0; i < o.calls; i++) {
			const t0 = performance.now();
			try {
				await withTimeout(c.predict(o.endpoint, o.args), o.callTimeoutMs);
				warm.push(performance.now() - t0);
			} catch (e) {
				fail(e);
			}
		}
		c.close();
	} catch (e) {
		fail(e);
	}
	out.warm_ms = summary(warm);
	process.stdout.write(JSON.stringify(out) + "\n");
	if (perCall.length === 0 && warm.length === 0) process.exitCode = 1;
}

// concurrent runs o.calls calls on one shared client, o.concurrent at a
// time, after o.warmup untimed ones (also o.concurrent at a time).
async function concurrent(o, out, fail) {
	const c = await withTimeout(Client.connect(o.url), o.callTimeoutMs);
	const run = async (n, lat) => {
		let next = 0;
		const worker = async () => {
			while (next < n) {
				next++;
				const t0 = performance.now();
				try {
					await withTimeout(c.predict(o.endpoint, o.args), o.callTimeoutMs);
					if (lat) lat.push(performance.now() - t0);
				} catch (e) {
					fail(e);
				}
			}
		};
		await Promise.all(Array.from({ length: o.concurrent }, worker));
	};
	try {
		await run(o.warmup, null);
		const lat = [];
		const t0 = performance.now();
		await run(o.calls, lat);
		const secs = (performance.now() - t0) / 1000;
		out.concurrent = { in_flight: o.concurrent, calls: lat.length, seconds: Math.round(secs * 1000) / 1000,
			calls_per_s: Math.round((lat.length / secs) * 100) / 100, latency_ms: summary(lat) };
	} finally {
		c.close();
	}
}

main()
	.catch((e) => {
		process.stderr.write(String(e && e.stack ? e.stack : e) + "\n");
		process.exitCode = 1;
	})
	// The client keeps its heartbeat stream open after close().
	.finally(() => setTimeout(() => process.exit(process.exitCode ?? 0), 10));
