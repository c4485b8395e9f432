// The Space app's route handler: one call of the Gradio app through the
// gradiopool gateway beside it (127.0.0.1), with the official
// @gradio/client, on behalf of the signed-in user.
//
// Plain JavaScript with JSDoc types, so that Node 20 runs it as it is (no
// build step); `tsc --checkJs` or an editor type-checks it. It opens a new
// Client (a new Gradio session) per request, so an app's gr.State does not
// survive between a user's requests: ../nextjs/ (the Next.js App Router
// version, app/api/predict/route.ts) keeps one Client per signed-in user.

import { Client } from "@gradio/client";

/**
 * @typedef {object} RouteOptions
 * @property {string} gatewayURL  the gateway, e.g. "http://127.0.0.1:8080"
 * @property {string} [apiKey]    GRADIOPOOL_API_KEYS entry the app presents (Bearer)
 * @property {(req: import("node:http").IncomingMessage) => (string|undefined)} userEmail
 *   the signed-in user's e-mail, from the app's own session; undefined = anonymous
 */

/**
 * createPredictHandler returns a Node request handler for
 * POST /api/predict/{endpoint} with a JSON body {"data": [...] | {...}}.
 * It answers {"data": [...]} or {"error": message} with the status.
 *
 * @param {RouteOptions} opts
 * @returns {(req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => Promise<void>}
 */
export function createPredictHandler(opts) {
	return async (req, res) => {
		const endpoint = "/" + decodeURIComponent((req.url || "").replace(/^\/api\/predict\//, "").split("?")[0]);
		/** @type {Record<string, string>} */
		const headers = {};
		const email = opts.userEmail(req);
		// The gateway keeps each user on one replica (warm session, own
		// gr.State) by this header; never trust one the browser sent.
		if (email) headers["X-Gradiopool-User"] = email;
		if (opts.apiKey) headers["Authorization"] = "Bearer " + opts.apiKey;
		/** @type {Client | undefined} */
		let client;
		try {
			const body = await readJSON(req);
			// The same code as against the Space itself: only the URL
			// changed (the gateway's front door speaks Gradio).
			client = await Client.connect(opts.gatewayURL, { headers });
			const result = await client.predict(endpoint, body.data ?? []);
			reply(res, 200, { data: result.data });
		} catch (err) {
			const e = /** @type {any} */ (err);
			reply(res, typeof e?.status === "number" && e.status >= 400 ? e.status : 502, { error: String(e?.message ?? e) });
		} finally {
			// Ends the client's heartbeat stream; the gateway keeps the
			// user's warm session for the next request.
			client?.close();
		}
	};
}

/**
 * @param {import("node:http").IncomingMessage} req
 * @returns {Promise<{data?: unknown[] | Record<string, unknown>}>}
 */
async function readJSON(req) {
	let raw = "";
	for await (const chunk of req) {
		raw += chunk;
		if (raw.length > 1 << 20) throw Object.assign(new Error("body too large"), { status: 413 });
	}
	try {
		return raw ? JSON.parse(raw) : {};
	} catch {
		throw Object.assign(new Error("the body must be JSON"), { status: 400 });
	}
}

/**
 * @param {import("node:http").ServerResponse} res
 * @param {number} status
 * @param {unknown} body
 */
function reply(res, status, body) {
	res.writeHead(status, { "content-type": "application/json" });
	res.end(JSON.stringify(body));
}
