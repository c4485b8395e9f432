#!/usr/bin/env node
// Benchmark of the official @gradio/client against one Gradio app, the
// baseline for gradiopool's benchmarks.
//
// Usage:
//   node bench.mjs URL [--endpoint /upper] [--args '["hello"]'] [--calls 200]
//                      [--concurrency 1,50] [--warmup 10] [--connects 5] [--clients 1]
//                      [--call-timeout-ms 30000]
//
// It measures, in this order:
//   - connect: Client.connect(URL) --connects times in a row (each client is
//     closed after), reporting the first (cold) and the median;
//   - for each concurrency level C: --warmup calls, then --calls predict()
//     calls of --endpoint with --args, C at a time, spread round-robin over
//     --clients connected clients (one client multiplexes all its calls on one
//     data stream, which is how the JS client is normally used);
//     latency p50/p95/p99/mean/max in ms (nearest rank), calls/s and errors;
//     a call still unanswered after --call-timeout-ms counts as a timeout
//     (the JS client can lose a call when a join races close_stream, see
//     PROTOCOL.md section 4.8) and is abandoned;
//   - the process's memory (process.memoryUsage) after the runs, in MiB.
//
// It prints one JSON object on stdout and exits 0 (1 if every call failed).

import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { Client } from "@gradio/client";

console.log = console.error; // stdout carries only the result
console.info = console.error;

function parseArgs(argv) {
	const o = {
		url: process.env.GRADIO_URL || "",
		endpoint: "/upper",
		args: ["hello"],
		calls: 200,
		concurrency: [1, 50],
		warmup: 10,
		connects: 5,
		clients: 1,
		callTimeoutMs: 30000
	};
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const v = () => {
			if (i + 1 >= argv.length) die(`${a} needs a value`);
			return argv[++i];
		};
		if (a === "--endpoint") o.endpoint = v();
		else if (a === "--args") o.args = JSON.parse(v());
		else if (a === "--calls") o.calls = int(a, v());
		else if (a === "--concurrency") o.concurrency = v().split(",").map((s) => int(a, s));
		else if (a === "--warmup") o.warmup = int(a, v(), 0);
		else if (a === "--connects") o.connects = int(a, v());
		else if (a === "--clients") o.clients = int(a, v());
		else if (a === "--call-timeout-ms") o.callTimeoutMs = int(a, v());
		else if (a.startsWith("--")) die(`unknown flag ${a}`);
		else o.url = a;
	}
	if (!o.url) die("missing app URL");
	if (!Array.isArray(o.args)) die("--args must be a JSON array");
	o.url = o.url.replace(/\/+$/, "");
	return o;
}

function int(flag, s, min = 1) {
	const n = Number(s);
	if (!Number.isInteger(n) || n < min) die(`${flag}: want an integer >= ${min}, got ${s}`);
	return n;
}

function die(msg) {
	process.stderr.write(`bench.mjs: ${msg}\n`);
	process.exit(2);
}

// percentile by nearest rank over sorted values.
function percentile(sorted, p) {
	if (sorted.length === 0) return null;
	const rank = Math.ceil((p / 100) * sorted.length);
	return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

const round = (x) => (x === null ? null : Math.round(x * 1000) / 1000);
const mib = (b) => Math.round((b / (1024 * 1024)) * 10) / 10;

const TIMEOUT = Symbol("timeout");

async function runLevel(clients, o, concurrency) {
	let next = 0;
	let errors = 0;
	let timeouts = 0;
	let firstError = null;
	const lat = [];
	const worker = async (w) => {
		for (;;) {
			const i = next++;
			if (i >= o.calls) return;
			const c = clients[(w + i) % clients.length];
			const t0 = performance.now();
			let timer;
			const timeout = new Promise((resolve) => {
				timer = setTimeout(() => resolve(TIMEOUT), o.callTimeoutMs);
			});
			try {
				const r = await Promise.race([c.predict(o.endpoint, o.args), timeout]);
				if (r === TIMEOUT) timeouts++;
				else lat.push(performance.now() - t0);
			} catch (e) {
				errors++;
				firstError ??= String(e && e.message ? e.message : e);
			} finally {
				clearTimeout(timer);
			}
		}
	};
	const t0 = performance.now();
	await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
	const wall = (performance.now() - t0) / 1000;
	lat.sort((a, b) => a - b);
	return {
		concurrency,
		calls: o.calls,
		ok: lat.length,
		errors,
		timeouts,
		first_error: firstError,
		p50_ms: round(percentile(lat, 50)),
		p95_ms: round(percentile(lat, 95)),
		p99_ms: round(percentile(lat, 99)),
		mean_ms: round(lat.length ? lat.reduce((a, b) => a + b, 0) / lat.length : null),
		max_ms: round(lat.length ? lat[lat.length - 1] : null),
		wall_s: round(wall),
		calls_per_s: round(lat.length / wall)
	};
}

async function main() {
	const o = parseArgs(process.argv.slice(2));
	const version = JSON.parse(readFileSync(new URL("./node_modules/@gradio/client/package.json", import.meta.url))).version;

	const connectMs = [];
	for (let i = 0; i < o.connects; i++) {
		const t0 = performance.now();
		const c = await Client.connect(o.url);
		connectMs.push(performance.now() - t0);
		c.close();
	}
	const sortedConnect = [...connectMs].sort((a, b) => a - b);

	const clients = [];
	for (let i = 0; i < o.clients; i++) clients.push(await Client.connect(o.url));

	const levels = [];
	for (const c of o.concurrency) {
		if (o.warmup > 0) await runLevel(clients, { ...o, calls: o.warmup }, Math.min(c, o.warmup));
		levels.push(await runLevel(clients, o, c));
	}
	for (const c of clients) c.close();

	const mem = process.memoryUsage();
	const out = {
		tool: "@gradio/client",
		client_version: version,
		node: process.version,
		url: o.url,
		endpoint: o.endpoint,
		clients: o.clients,
		connect_ms: {
			n: connectMs.length,
			first: round(connectMs[0]),
			p50: round(percentile(sortedConnect, 50)),
			max: round(sortedConnect[sortedConnect.length - 1])
		},
		levels,
		memory_mib: {
			rss: mib(mem.rss),
			heap_used: mib(mem.heapUsed),
			heap_total: mib(mem.heapTotal),
			external: mib(mem.external),
			array_buffers: mib(mem.arrayBuffers)
		}
	};
	process.stdout.write(JSON.stringify(out) + "\n");
	return levels.every((l) => l.ok === 0) ? 1 : 0;
}

main().then(
	(code) => process.exit(code), // heartbeat streams stay open: exit explicitly
	(e) => {
		process.stderr.write(`bench.mjs: ${e && e.stack ? e.stack : e}\n`);
		process.exit(1);
	}
);
