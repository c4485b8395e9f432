// Where Hugging Face sends the browser back after the sign-in.
export function redirectURI(req: Request): string {
	const host = process.env.SPACE_HOST;
	return host ? `https://${host}/login/callback` : new URL("/login/callback", req.url).toString();
}
