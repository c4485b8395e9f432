// One @gradio/client per signed-in user, kept between requests: each Client
// is one Gradio session (its session_hash), so a user's gr.State lives as
// long as their Client. A new Client per request (the naive route handler)
// starts a new session each time and loses the state.
//
// The cache is an LRU bounded in entries and in time: an entry unused for
// ttlMs (the design's one hour, the gateway's user_assignment_ttl) or
// pushed out by maxEntries is closed (its heartbeat stream ends) and
// forgotten; the user's next request connects a new Client (new state).
// Entries are keyed by the user's e-mail and each Client carries that
// user's X-Gradiopool-User header from its connect on, so one user's
// Client, and state, never serves another.

export interface Closable {
	close(): void;
}

export interface ClientCacheOptions {
	/** Entries kept at most; the least recently used goes first. */
	maxEntries?: number;
	/** An entry unused for this long is closed. Default one hour. */
	ttlMs?: number;
	/** The clock (tests pass their own). */
	now?: () => number;
}

interface Entry<C> {
	client: Promise<C>;
	usedAt: number;
}

export const DEFAULT_TTL_MS = 60 * 60 * 1000;
export const DEFAULT_MAX_ENTRIES = 500;

export class ClientCache<C extends Closable> {
	// A Map iterates in insertion order: re-inserting on use keeps the
	// least recently used first.
	private readonly entries = new Map<string, Entry<C>>();
	private readonly maxEntries: number;
	private readonly ttlMs: number;
	private readonly now: () => number;

	constructor(opts: ClientCacheOptions = {}) {
		this.maxEntries = Math.max(1, opts.maxEntries ?? DEFAULT_MAX_ENTRIES);
		this.ttlMs = opts.ttlMs ?? DEFAULT_TTL_MS;
		this.now = opts.now ?? Date.now;
	}

	/**
	 * get returns the Client of key, connecting it with connect on first
	 * use (concurrent first requests of one user share one connect). A
	 * connect that fails is not kept: the next request tries again.
	 */
	get(key: string, connect: () => Promise<C>): Promise<C> {
		const now = this.now();
		this.sweep(now);
		let e = this.entries.get(key);
		if (e) {
			this.entries.delete(key);
		} else {
			const client = connect();
			e = { client, usedAt: now };
			client.catch(() => {
				if (this.entries.get(key) === e) this.entries.delete(key);
			});
		}
		e.usedAt = now;
		this.entries.set(key, e);
		while (this.entries.size > this.maxEntries) {
			const [oldest] = this.entries.keys();
			this.evict(oldest);
		}
		return e.client;
	}

	/** drop closes and forgets key's Client (e.g. its connection broke). */
	drop(key: string): void {
		this.evict(key);
	}

	/** size is the number of Clients kept. */
	get size(): number {
		return this.entries.size;
	}

	/** closeAll closes every Client (the app is stopping). */
	closeAll(): void {
		for (const key of [...this.entries.keys()]) this.evict(key);
	}

	private sweep(now: number): void {
		for (const [key, e] of this.entries) {
			if (now - e.usedAt < this.ttlMs) break; // the rest were used later
			this.evict(key);
		}
	}

	private evict(key: string): void {
		const e = this.entries.get(key);
		if (!e) return;
		this.entries.delete(key);
		e.client.then((c) => c.close(), () => {});
	}
}
