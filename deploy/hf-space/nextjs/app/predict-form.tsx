"use client";

import { useState } from "react";

// A form that posts {"endpoint", "data"} to /api/predict and shows the
// answer. Replace it with your own UI.
export default function Predict() {
	const [endpoint, setEndpoint] = useState("/predict");
	const [input, setInput] = useState('["hello"]');
	const [output, setOutput] = useState("");
	async function send() {
		const res = await fetch("/api/predict", {
			method: "POST",
			headers: { "content-type": "application/json" },
			body: JSON.stringify({ endpoint, data: JSON.parse(input) }),
		});
		setOutput(res.status + " " + (await res.text()));
	}
	return (
		<form onSubmit={(e) => { e.preventDefault(); void send(); }}>
			<p><label>endpoint <input value={endpoint} onChange={(e) => setEndpoint(e.target.value)} /></label></p>
			<p><label>data (JSON) <input value={input} onChange={(e) => setInput(e.target.value)} size={40} /></label></p>
			<button type="submit">call</button>
			<pre>{output}</pre>
		</form>
	);
}
