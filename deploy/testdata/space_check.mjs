// Runs the Space app's route handler (route.mjs, copied beside this file
// by TestSpaceRouteHandler) in a Node HTTP server and calls it: as a
// signed-in user (the e-mail comes from the test's stand-in for the
// session), anonymously, with keyword arguments and with an unknown
// endpoint. Prints one JSON line per call on stdout.
//
// Usage: node space_check.mjs GATEWAY_URL API_KEY EMAIL

import { createServer } from "node:http";
import { createPredictHandler } from "./route.mjs";

console.log = console.error; // stdout carries only the results
const [gatewayURL, apiKey, email] = process.argv.slice(2);
const handler = createPredictHandler({ gatewayURL, apiKey, userEmail: (req) => req.headers["x-test-session-user"] || undefined });
const server = createServer((req, res) => handler(req, res));
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const base = `http://127.0.0.1:${server.address().port}`;

async function call(name, path, body, user) {
	const headers = { "content-type": "application/json" };
	if (user) headers["x-test-session-user"] = user;
	const res = await fetch(base + path, { method: "POST", headers, body: JSON.stringify(body) });
	process.stdout.write(JSON.stringify({ name, status: res.status, body: await res.json() }) + "\n");
}

try {
	await call("signed in", "/api/predict/upper", { data: ["hello space"] }, email);
	await call("anonymous", "/api/predict/upper", { data: ["anon"] });
	await call("state", "/api/predict/counter", { data: ["a"] }, email);
	await call("unknown endpoint", "/api/predict/nope", { data: [] }, email);
} finally {
	server.close();
}
process.exit(0); // nothing of the calls may keep node alive past here
