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
