package waitq

import "context"

// Watcher sees a caller's wait in a queue: the gateway's front door shows
// the caller its place (Gradio's estimation messages) while it waits.
//
// Queued is called when the caller starts waiting, outside the queue
// owner's lock; pos returns the caller's rank (0-based, see Queue.Rank)
// and the queue's length, taking that lock. Left is called when the
// caller leaves the queue (served, timed out, cancelled), before its
// waiter is reused: the Watcher must not call pos once Left has begun, so
// it serialises the two with a lock of its own. One caller may queue
// several times in turn (a cluster permit, then a session).
type Watcher interface {
	Queued(pos func() (rank, size int))
	Left()
}

type watcherKey struct{}

// WithWatcher returns ctx carrying w.
func WithWatcher(ctx context.Context, w Watcher) context.Context {
	return context.WithValue(ctx, watcherKey{}, w)
}

// WatcherFrom returns the Watcher of ctx, nil if none.
func WatcherFrom(ctx context.Context) Watcher {
	w, _ := ctx.Value(watcherKey{}).(Watcher)
	return w
}
