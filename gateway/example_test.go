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

// Example opens the gateway over one simulated replica and calls it over
// HTTP.
func Example() {
	sim := gradiotest.NewServer(nil)
	defer sim.Close()

	g, err := gateway.Open(context.Background(), gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}}}, nil)
	if err != nil {
		panic(err)
	}
	defer g.Close(context.Background())
	srv := httptest.NewServer(g) // or g.Serve(ctx, listener), which drains on exit
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
