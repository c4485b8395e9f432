// Drives the Space's Next.js route handler (deploy/hf-space/nextjs, compiled
// to CommonJS by TestSpaceNextRoute) as Next.js calls it: POST(Request) ->
// Response. Three calls of one signed-in user and one of another to the
// gr.State endpoint "counter", then the same user again after the cache
// evicted their Client, and one anonymous call. Prints one JSON line per
// call on stdout.
//
// Usage: node nextjs_check.cjs GATEWAY_URL API_KEY

"use strict";

const [gatewayURL, apiKey] = process.argv.slice(2);
process.env.GRADIOPOOL_URL = gatewayURL;
process.env.GRADIOPOOL_APP_KEY = apiKey;
process.env.SESSION_SECRET = "test-session-secret";
console.log = console.error; // stdout carries only the results

const route = require("./out/app/api/predict/route.js");
const session = require("./out/lib/session.js");
const { ClientCache } = require("./out/lib/clients.js");

async function call(name, user, data, rawCookie) {
	const headers = { "content-type": "application/json" };
	if (user) headers.cookie = `${session.SESSION_COOKIE}=${encodeURIComponent(session.sign(user))}`;
	if (rawCookie) headers.cookie = rawCookie;
	const endpoint = "/counter";
	const res = await route.POST(new Request("http://app/api/predict", { method: "POST", headers, body: JSON.stringify({ endpoint, data }) }));
	process.stdout.write(JSON.stringify({ name, status: res.status, body: await res.json() }) + "\n");
}

// The cache's own bounds, with a clock of the test's: the TTL closes an
// idle Client, the LRU the least recently used one, each closed once.
function cacheChecks() {
	let now = 0;
	const closed = [];
	const fake = (k) => () => Promise.resolve({ close: () => closed.push(k) });
	const c = new ClientCache({ maxEntries: 2, ttlMs: 1000, now: () => now });
	c.get("a", fake("a"));
	c.get("b", fake("b"));
	now = 500;
	c.get("a", fake("a2")); // a used again (kept: a2 never connects): b is now the least recent
	c.get("c", fake("c")); // over maxEntries: b goes
	now = 1600; // b gone, c idle 1100 ms > ttl; a idle 1100 ms too
	c.get("d", fake("d"));
	return new Promise((r) => setTimeout(r, 10)).then(() => ({ closed, size: c.size }));
}

(async () => {
	await call("alice 1", "alice@example.com", ["a1"]);
	await call("alice 2", "Alice@Example.com ", ["a2"]); // the same user, written otherwise
	await call("bob 1", "bob@example.com", ["b1"]);
	await call("alice 3", "alice@example.com", ["a3"]);
	await call("anonymous 1", "", ["x1"]);
	await call("anonymous 2", "", ["x2"]);
	// A cookie not signed with SESSION_SECRET is no user: anonymous.
	await call("forged cookie", "", ["f1"], `${session.SESSION_COOKIE}=${encodeURIComponent("alice@example.com.forged")}`);
	const cache = await cacheChecks();
	process.stdout.write(JSON.stringify({ name: "cache", status: 0, body: cache }) + "\n");
	process.exit(0); // the kept Clients' streams must not keep node alive
})().catch((err) => {
	console.error(err);
	process.exit(1);
});
