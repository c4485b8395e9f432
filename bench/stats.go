package bench

import (
	"context"
	"encoding/json"

	"github.com/gradiopool/gradiopool/pool"
)

// statsNumbers returns the numeric top-level fields of the pool's stats
// JSON (the seed's names: inUseConnections, totalQueued, ...). Reading the
// JSON rather than the Go fields keeps the harness on the documented
// contract.
func statsNumbers(p *pool.Pool) map[string]float64 {
	b, err := json.Marshal(p.Stats(context.Background()))
	if err != nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range m {
		if f, ok := v.(float64); ok {
			out[k] = f
		}
	}
	return out
}
