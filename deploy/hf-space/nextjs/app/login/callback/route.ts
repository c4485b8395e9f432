// GET /login/callback: the end of "Sign in with Hugging Face": the code is
// exchanged for the user's e-mail, kept in the signed session cookie.

import { cookie, sign, unsign, SESSION_COOKIE, STATE_COOKIE } from "../../../lib/session";
import { redirectURI } from "../oauth";

export const runtime = "nodejs";
export const dynamic = "force-dynamic";

export async function GET(req: Request): Promise<Response> {
	const oidc = process.env.OPENID_PROVIDER_URL;
	const url = new URL(req.url);
	try {
		if (!oidc) throw new Error("hf_oauth is not enabled");
		const state = unsign(cookie(req, STATE_COOKIE) ?? "");
		if (!state || state !== url.searchParams.get("state")) throw new Error("bad state");
		const basic = Buffer.from(`${process.env.OAUTH_CLIENT_ID}:${process.env.OAUTH_CLIENT_SECRET}`).toString("base64");
		const tok = await fetch(oidc + "/oauth/token", {
			method: "POST",
			headers: { authorization: "Basic " + basic },
			body: new URLSearchParams({ grant_type: "authorization_code", code: url.searchParams.get("code") ?? "", redirect_uri: redirectURI(req) }),
		});
		const { access_token } = (await tok.json()) as { access_token?: string };
		const info = (await (await fetch(oidc + "/oauth/userinfo", { headers: { authorization: "Bearer " + access_token } })).json()) as { email?: string };
		if (!info.email) throw new Error("no e-mail: add the email scope (hf_oauth_scopes)");
		return new Response(null, {
			status: 302,
			headers: { location: "/", "set-cookie": `${SESSION_COOKIE}=${encodeURIComponent(sign(info.email))}; HttpOnly; Secure; SameSite=Lax; Path=/` },
		});
	} catch (err) {
		return new Response("login failed: " + String(err), { status: 400, headers: { "content-type": "text/plain" } });
	}
}
