// Package logattr holds the one convention every gradiopool log line
// follows for times: a duration is written as a number of milliseconds
// under a key ending in "_ms" (e.g. "queue_timeout_ms":30000), never as
// slog's default nanoseconds ("queue_timeout":30000000000), which read as
// a different unit beside the access line's duration_ms.
package logattr
