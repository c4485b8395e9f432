package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// Example runs the gateway over a pool of one simulated replica and calls
// it over HTTP.
func Example() {
	sim := gradiotest.NewServer(nil)
	defer sim.Close()

	cfg := gateway.Config{Replicas: []string{sim.URL}}
	cfg.Normalize()
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(nil, metrics))
	if err != nil {
		panic(err)
	}
	defer p.Close(context.Background())
	backend := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(backend)
	srv := httptest.NewServer(gateway.New(cfg, backend, nil, metrics))
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/v1/predict/upper", strings.NewReader(`{"data":["hello"]}`))
	req.Header.Set(gateway.UserHeader, "alice@example.com")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var out struct{ Data []string }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	fmt.Println(resp.StatusCode, out.Data)
	// Output: 200 [HELLO]
}
