// The home page: sign in, then call the Gradio app through /api/predict.
// A server component reads the session; the form is a client component.

import { cookies } from "next/headers";
import { SESSION_COOKIE, unsign } from "../lib/session";
import Predict from "./predict-form";

export const dynamic = "force-dynamic";

export default async function Home() {
	const c = (await cookies()).get(SESSION_COOKIE)?.value;
	const email = c ? unsign(c) : undefined;
	return (
		<main style={{ fontFamily: "sans-serif", maxWidth: 640, margin: "2rem auto" }}>
			<p>{email ? `Signed in as ${email}` : <a href="/login">Sign in with Hugging Face</a>}</p>
			<Predict />
		</main>
	);
}
