package gradio

// EventHook observes every event of a job submitted with it (see
// [SubmitOptions]), like net/http/httptrace does for requests: the caller
// learns when a job was queued, started, produced its first output and
// ended, without reading Job.Events and without a goroutine per job. It
// runs while the session delivers the event: it must be quick and must not
// call back into the Client or the Job.
type EventHook func(Event)
