package gateway

import (
	"net/http"

	"github.com/gradiopool/gradiopool/pool"
)

// priorityHeader sets the class of a call that has to wait for a session:
// "high", "normal" (the default) or "low" (see pool.CallOptions).
const priorityHeader = "X-Gradiopool-Priority"

// callPriority returns the caller's priority class, or a bad_priority error
// for a value that is not a class.
func callPriority(r *http.Request) (pool.Priority, *apiError) {
	v := r.Header.Get(priorityHeader)
	if v == "" {
		return pool.PriorityNormal, nil
	}
	p, err := pool.ParsePriority(v)
	if err != nil {
		return pool.PriorityNormal, badRequest("bad_priority", "%s must be high, normal or low", priorityHeader)
	}
	return p, nil
}
