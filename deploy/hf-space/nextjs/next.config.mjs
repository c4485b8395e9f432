// The gateway listens on 127.0.0.1 only; its dashboard (/admin) and admin
// API (/api/admin/*, behind GRADIOPOOL_ADMIN_TOKEN) are reached through the
// app's public port by these rewrites, which Next.js proxies.
const gateway = process.env.GRADIOPOOL_URL || "http://127.0.0.1:8080";

/** @type {import('next').NextConfig} */
const nextConfig = {
	// A self-contained server (.next/standalone/server.js) for the Docker
	// image: no node_modules to copy.
	output: "standalone",
	async rewrites() {
		return [
			{ source: "/admin", destination: `${gateway}/admin` },
			{ source: "/admin/:path*", destination: `${gateway}/admin/:path*` },
			{ source: "/api/admin/:path*", destination: `${gateway}/api/admin/:path*` },
		];
	},
};

export default nextConfig;
