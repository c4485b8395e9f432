// The body of app/api/predict/route.ts, apart from Next.js so that it can
// be tested with plain Node (deploy/space_test.go): one call of the Gradio
// app through the gradiopool gateway beside the app, as the signed-in
// user, on that user's own @gradio/client (lib/clients.ts).

import { Client } from "@gradio/client";
import { ClientCache } from "./clients";

export interface PredictOptions {
	/** The gateway, e.g. "http://127.0.0.1:8080" (GRADIOPOOL_URL). */
	gatewayURL: string;
	/** An entry of the gateway's GRADIOPOOL_API_KEYS (GRADIOPOOL_APP_KEY). */
	apiKey?: string;
	/** The signed-in user's e-mail from the app's session; undefined: anonymous. */
	userEmail: (req: Request) => string | undefined;
	/** One Client per signed-in user. */
	clients: ClientCache<Client>;
}

interface PredictBody {
	endpoint?: unknown;
	data?: unknown;
}

const MAX_BODY = 1 << 20;

/**
 * predict answers POST {"endpoint": "/name", "data": [...] | {...}} with
 * {"data": [...]} or {"error": message}.
 */
export async function predict(req: Request, opts: PredictOptions): Promise<Response> {
	let body: PredictBody;
	try {
		const raw = await req.text();
		if (raw.length > MAX_BODY) return json(413, { error: "body too large" });
		body = raw ? (JSON.parse(raw) as PredictBody) : {};
	} catch {
		return json(400, { error: "the body must be JSON" });
	}
	if (typeof body.endpoint !== "string" || !body.endpoint) {
		return json(400, { error: 'the body needs "endpoint", e.g. "/predict"' });
	}
	const endpoint = body.endpoint.startsWith("/") ? body.endpoint : "/" + body.endpoint;
	const data = Array.isArray(body.data) || (typeof body.data === "object" && body.data !== null) ? body.data : [];

	const email = opts.userEmail(req);
	const headers: Record<string, string> = {};
	// The gateway keeps each user on one replica (warm session) by this
	// header, set from the app's own session only.
	if (email) headers["X-Gradiopool-User"] = email;
	if (opts.apiKey) headers["Authorization"] = "Bearer " + opts.apiKey;
	const connect = () => Client.connect(opts.gatewayURL, { headers });

	// Anonymous callers share nothing: a Client of their own, closed after
	// the call (their gr.State starts empty each time).
	let client: Client | undefined;
	try {
		client = email ? await opts.clients.get(email.trim().toLowerCase(), connect) : await connect();
		const result = await client.predict(endpoint, data as unknown[] | Record<string, unknown>);
		return json(200, { data: result.data });
	} catch (err) {
		const e = err as { status?: unknown; message?: unknown };
		const status = typeof e?.status === "number" && e.status >= 400 ? e.status : 502;
		return json(status, { error: String(e?.message ?? err) });
	} finally {
		if (!email) client?.close();
	}
}

function json(status: number, body: unknown): Response {
	return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}
