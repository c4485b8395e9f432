// Package logattr holds the one convention every gradiopool log line
// follows for times: a duration is written as a number of milliseconds
// under a key ending in "_ms" (e.g. "queue_timeout_ms":30000), never as
// slog's default nanoseconds ("queue_timeout":30000000000), which read as
// a different unit beside the access line's duration_ms.
package logattr

import (
	"log/slog"
	"time"
)

// Ms is d as the attribute key+"_ms", in milliseconds with microsecond
// precision.
func Ms(key string, d time.Duration) slog.Attr {
	return slog.Float64(key+"_ms", float64(d.Microseconds())/1000)
}
