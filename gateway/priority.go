package gateway

import (
	"context"
	"net/http"

	"github.com/gradiopool/gradiopool/pool"
)

// PriorityHeader sets the class of a call that has to wait for a session:
// "high", "normal" (the default) or "low" (see pool.WithPriority).
const PriorityHeader = "X-Gradiopool-Priority"

// priorityContext returns r's context carrying the caller's priority class,
// or a bad_priority error for a value that is not a class.
func priorityContext(r *http.Request) (context.Context, *apiError) {
	v := r.Header.Get(PriorityHeader)
	if v == "" {
		return r.Context(), nil
	}
	p, err := pool.ParsePriority(v)
	if err != nil {
		return nil, badRequest("bad_priority", "%s must be high, normal or low", PriorityHeader)
	}
	return pool.WithPriority(r.Context(), p), nil
}
