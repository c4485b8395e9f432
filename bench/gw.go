package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/pool"
)

// gatewayServer is a gateway over p listening on loopback, and an HTTP
// client sized for the load (keep-alive connections enough for every call
// in flight, so the benchmark measures the gateway, not TCP set-up).
type gatewayServer struct {
	URL    string
	g      *gateway.Gateway
	srv    *http.Server
	client *http.Client
}

func startGateway(p *pool.Pool, maxConns int) (*gatewayServer, error) {
	g := gateway.New(gateway.Config{}, gateway.PoolBackend(p, maxConns), nil, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}
	return &gatewayServer{URL: "http://" + l.Addr().String(), g: g, srv: srv, client: &http.Client{Transport: tr}}, nil
}

func (g *gatewayServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if fd := g.g.FrontDoor(); fd != nil {
		fd.Drain() // its heartbeat streams would hold Shutdown
	}
	_ = g.srv.Shutdown(ctx)
	g.client.CloseIdleConnections()
	_ = g.g.Close(ctx) // the Gradio front door's sessions; the pool is the caller's
}

// httpError is a non-200 answer of the gateway.
type httpError struct {
	Status     int
	RetryAfter string
}

func (e *httpError) Error() string {
	if e.RetryAfter != "" {
		return fmt.Sprintf("http %d (Retry-After: %s)", e.Status, e.RetryAfter)
	}
	return fmt.Sprintf("http %d", e.Status)
}

// predict is POST /v1/predict/{api}; user "" is anonymous.
func (g *gatewayServer) predict(ctx context.Context, user, api string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/v1/predict/"+api, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set("X-Gradiopool-User", user)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &httpError{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	}
	return nil
}

// classifyHTTP names gateway answers by status; a Retry-After value is kept
// only as "with Retry-After" so that the classes stay few.
func classifyHTTP(err error) string {
	if he, ok := err.(*httpError); ok {
		s := "http " + strconv.Itoa(he.Status)
		if he.RetryAfter != "" {
			s += " with Retry-After"
		}
		return s
	}
	return classify(err)
}

// gatewayOverSims starts the simulated replicas of spec, a pool over them
// with the default sizes and a gateway in front; stop closes all three.
func (e *env) gatewayOverSims(ctx context.Context, spec simSpec) (sm *sims, p *pool.Pool, gw *gatewayServer, stop func(), err error) {
	sm, err = e.startSims(ctx, spec)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	p, err = pool.New(pool.Config{Replicas: sm.URLs})
	if err != nil {
		sm.Close()
		return nil, nil, nil, nil, err
	}
	gw, err = startGateway(p, pool.Config{}.WithDefaults().MaxConnections)
	if err != nil {
		_ = p.Close(context.WithoutCancel(ctx))
		sm.Close()
		return nil, nil, nil, nil, err
	}
	return sm, p, gw, func() {
		gw.Close()
		_ = p.Close(context.WithoutCancel(ctx))
		sm.Close()
	}, nil
}
