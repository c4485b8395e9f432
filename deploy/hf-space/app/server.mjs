// The Space's app: a small Node server (the place of the seed's Next.js
// app) that signs users in with "Sign in with Hugging Face" (hf_oauth in
// README.md) and calls the Gradio app through the gradiopool gateway on
// 127.0.0.1, as the signed-in user. Plain Node 20, no dependency but
// @gradio/client.

import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import { createPredictHandler } from "./route.mjs";

const env = process.env;
const port = Number(env.PORT || 7860);
const gatewayURL = env.GRADIOPOOL_URL || "http://127.0.0.1:8080";
// Signs the session cookie; a random key logs everyone out at each restart.
const secret = env.SESSION_SECRET || randomBytes(32).toString("hex");
// Hugging Face sets these for a Space with hf_oauth: true.
const oidc = env.OPENID_PROVIDER_URL || "";
const redirectURI = env.SPACE_HOST ? `https://${env.SPACE_HOST}/login/callback` : `http://127.0.0.1:${port}/login/callback`;

/** @param {string} v */
const sign = (v) => v + "." + createHmac("sha256", secret).update(v).digest("base64url");
/** @param {string} s @returns {string|undefined} */
function unsign(s) {
	const i = s.lastIndexOf(".");
	if (i < 0) return undefined;
	const v = s.slice(0, i);
	const a = Buffer.from(sign(v)), b = Buffer.from(s);
	return a.length === b.length && timingSafeEqual(a, b) ? v : undefined;
}
/** @param {import("node:http").IncomingMessage} req @param {string} name */
function cookie(req, name) {
	for (const part of (req.headers.cookie || "").split(";")) {
		const [k, ...v] = part.trim().split("=");
		if (k === name) return decodeURIComponent(v.join("="));
	}
	return undefined;
}
/** The signed-in user's e-mail, from the signed session cookie only. */
const userEmail = (/** @type {import("node:http").IncomingMessage} */ req) => {
	const c = cookie(req, "gp_session");
	return c ? unsign(c) : undefined;
};

const predict = createPredictHandler({ gatewayURL, apiKey: env.GRADIOPOOL_APP_KEY, userEmail });

const server = createServer(async (req, res) => {
	const url = new URL(req.url || "/", "http://app");
	if (req.method === "POST" && url.pathname.startsWith("/api/predict/")) return predict(req, res);
	if (url.pathname === "/login" && oidc) {
		const state = randomBytes(16).toString("hex");
		const to = new URL(oidc + "/oauth/authorize");
		to.search = new URLSearchParams({ client_id: env.OAUTH_CLIENT_ID || "", redirect_uri: redirectURI,
			scope: env.OAUTH_SCOPES || "openid profile email", state, response_type: "code" }).toString();
		res.writeHead(302, { location: to.toString(), "set-cookie": `gp_state=${sign(state)}; HttpOnly; Secure; SameSite=Lax; Path=/` });
		return res.end();
	}
	if (url.pathname === "/login/callback" && oidc) {
		try {
			const state = unsign(cookie(req, "gp_state") || "");
			if (!state || state !== url.searchParams.get("state")) throw new Error("bad state");
			const basic = Buffer.from(`${env.OAUTH_CLIENT_ID}:${env.OAUTH_CLIENT_SECRET}`).toString("base64");
			const tok = await fetch(oidc + "/oauth/token", { method: "POST", headers: { authorization: "Basic " + basic },
				body: new URLSearchParams({ grant_type: "authorization_code", code: url.searchParams.get("code") || "", redirect_uri: redirectURI }) });
			const { access_token } = await tok.json();
			const info = await (await fetch(oidc + "/oauth/userinfo", { headers: { authorization: "Bearer " + access_token } })).json();
			if (!info.email) throw new Error("no e-mail: add the email scope (hf_oauth_scopes)");
			res.writeHead(302, { location: "/", "set-cookie": `gp_session=${encodeURIComponent(sign(info.email))}; HttpOnly; Secure; SameSite=Lax; Path=/` });
		} catch (err) {
			res.writeHead(400, { "content-type": "text/plain" });
			return res.end("login failed: " + String(err));
		}
		return res.end();
	}
	if (url.pathname === "/") {
		const who = userEmail(req);
		res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
		return res.end(`<!doctype html><title>app</title><p>${who ? "signed in" : '<a href="/login">Sign in with Hugging Face</a>'}</p>`);
	}
	res.writeHead(404, { "content-type": "application/json" });
	res.end('{"error":"not found"}');
});

server.listen(port, "0.0.0.0", () => console.error(`app listening on :${port}, gateway ${gatewayURL}`));
// start.sh sends SIGTERM: stop taking requests, finish those in flight.
process.on("SIGTERM", () => server.close(() => process.exit(0)));
