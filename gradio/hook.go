package gradio

import "context"

// EventHook observes every event of the jobs submitted with a context
// carrying it (see [WithEventHook]), like net/http/httptrace does for
// requests: the caller learns when a job was queued, started, produced its
// first output and ended, without reading Job.Events (which Predict never
// does) and without a goroutine per job.
type EventHook func(Event)

type hookKey struct{}

// WithEventHook returns a context whose jobs (Client.Submit and Predict
// with it) call h with each of their events, in order, the final
// EventCompleted or EventError included. h runs while the session
// delivers the event: it must be quick and must not call back into the
// Client or the Job. Jobs of Predict, which keep no events, still call h.
func WithEventHook(ctx context.Context, h EventHook) context.Context {
	return context.WithValue(ctx, hookKey{}, h)
}

func eventHookFrom(ctx context.Context) EventHook {
	h, _ := ctx.Value(hookKey{}).(EventHook)
	return h
}
