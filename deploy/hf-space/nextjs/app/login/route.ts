// GET /login: "Sign in with Hugging Face" (OAuth; the Space's README sets
// hf_oauth: true, and the Space provides OAUTH_CLIENT_ID,
// OAUTH_CLIENT_SECRET and OPENID_PROVIDER_URL).

import { randomBytes } from "node:crypto";
import { sign, STATE_COOKIE } from "../../lib/session";
import { redirectURI } from "./oauth";

export const runtime = "nodejs";
export const dynamic = "force-dynamic";

export async function GET(req: Request): Promise<Response> {
	const oidc = process.env.OPENID_PROVIDER_URL;
	if (!oidc) return new Response("sign-in needs hf_oauth: true in the Space's README", { status: 501 });
	const state = randomBytes(16).toString("hex");
	const to = new URL(oidc + "/oauth/authorize");
	to.search = new URLSearchParams({
		client_id: process.env.OAUTH_CLIENT_ID ?? "",
		redirect_uri: redirectURI(req),
		scope: process.env.OAUTH_SCOPES || "openid profile email",
		state,
		response_type: "code",
	}).toString();
	return new Response(null, {
		status: 302,
		headers: { location: to.toString(), "set-cookie": `${STATE_COOKIE}=${sign(state)}; HttpOnly; Secure; SameSite=Lax; Path=/` },
	});
}
