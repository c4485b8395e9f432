// POST /api/predict {"endpoint": "/name", "data": [...]}: the Next.js App
// Router route handler calling the Gradio app through the gradiopool
// gateway, as the signed-in user, on that user's own @gradio/client (kept
// an hour between requests, so that gr.State survives: lib/clients.ts).

import type { Client } from "@gradio/client";
import { ClientCache } from "../../../lib/clients";
import { predict } from "../../../lib/predict";
import { userEmail } from "../../../lib/session";

// The route keeps Clients in memory and uses node:crypto: the Node.js
// runtime, one server process (`next start` or the standalone server).
export const runtime = "nodejs";
export const dynamic = "force-dynamic";

const clients = new ClientCache<Client>({ maxEntries: Number(process.env.GRADIO_CLIENTS_MAX) || undefined });

export async function POST(req: Request): Promise<Response> {
	return predict(req, {
		gatewayURL: process.env.GRADIOPOOL_URL || "http://127.0.0.1:8080",
		apiKey: process.env.GRADIOPOOL_APP_KEY,
		userEmail,
		clients,
	});
}
