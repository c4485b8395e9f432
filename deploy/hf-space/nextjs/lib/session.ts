// The app's session: the signed-in user's e-mail in a cookie signed with
// SESSION_SECRET (HMAC-SHA256), set by the "Sign in with Hugging Face"
// callback (app/login/callback/route.ts). The e-mail the gateway sees comes
// from here only: never from a header or body the browser sent.

import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

export const SESSION_COOKIE = "gp_session";
export const STATE_COOKIE = "gp_state";

// A random key logs everyone out at each restart; set SESSION_SECRET.
const secret = process.env.SESSION_SECRET || randomBytes(32).toString("hex");

export function sign(value: string): string {
	return value + "." + createHmac("sha256", secret).update(value).digest("base64url");
}

export function unsign(signed: string): string | undefined {
	const i = signed.lastIndexOf(".");
	if (i < 0) return undefined;
	const value = signed.slice(0, i);
	const a = Buffer.from(sign(value));
	const b = Buffer.from(signed);
	return a.length === b.length && timingSafeEqual(a, b) ? value : undefined;
}

export function cookie(req: Request, name: string): string | undefined {
	for (const part of (req.headers.get("cookie") ?? "").split(";")) {
		const [k, ...v] = part.trim().split("=");
		if (k === name) return decodeURIComponent(v.join("="));
	}
	return undefined;
}

/** userEmail is the signed-in user's e-mail, or undefined (anonymous). */
export function userEmail(req: Request): string | undefined {
	const c = cookie(req, SESSION_COOKIE);
	return c ? unsign(c) : undefined;
}
