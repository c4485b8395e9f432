package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
)

// rawRequest sends one request line as is (no client-side path cleaning)
// and returns the answer's status, Content-Type and body.
func rawRequest(t *testing.T, addr, method, target, auth string) (int, string, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", method, target)
	if auth != "" {
		req += "Authorization: Bearer " + auth + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b.String()
}

// Regression (issue 16, defect 6) and security: every variant of a
// protected path is refused without credentials, answered as JSON and
// logged; //api/admin/pool-stats got an HTML 307 and no access line.
func TestPathVariants(t *testing.T) {
	f := newFake()
	_, srv, logs := newGateway(t, f, func(c *gateway.Config) {
		c.Secrets.APIKeys = []string{"key-1"}
		c.Secrets.AdminToken = "admin-1"
	})
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		method, target, auth string
		status               int
	}{
		{"GET", "//api/admin/pool-stats", "", 404},
		{"GET", "//api/admin/pool-stats", "key-1", 404},
		{"GET", "/api//admin/pool-stats", "", 404},
		{"GET", "/api/admin/./pool-stats", "", 404},
		{"GET", "/v1/../api/admin/pool-stats", "", 404},
		{"GET", "/api/admin/pool-stats/", "", 404},
		{"GET", "/API/admin/pool-stats", "", 404},
		{"GET", "/api/admin/pool-stats", "", 401},
		{"GET", "/api/admin/pool-stats", "key-1", 403},
		{"HEAD", "/api/admin/pool-stats", "", 401},
		{"GET", "/api/admin/pool-stats", "admin-1", 200},
		{"GET", "//metrics", "", 404},
		{"GET", "/metrics", "", 401},
		{"HEAD", "/metrics", "wrong", 403},
		{"POST", "//v1/predict/upper", "", 404},
		{"POST", "/v1/predict/upper", "", 401},
		{"POST", "/v1/predict/upper", "admin-1", 403},
		{"POST", "/V1/predict/upper", "", 404},
		{"POST", "/gradio_api/call/upper/", "", 401},
		{"GET", "/gradio_api/call/upper/x", "", 401},
		{"POST", "/call/upper", "wrong", 403},
	} {
		name := tc.method + " " + tc.target + " auth=" + tc.auth
		status, ctype, body := rawRequest(t, addr, tc.method, tc.target, tc.auth)
		if status != tc.status {
			t.Errorf("%s: %d, want %d: %s", name, status, tc.status, body)
			continue
		}
		if tc.method != "HEAD" && !strings.HasPrefix(ctype, "application/json") {
			t.Errorf("%s: Content-Type %q, want JSON", name, ctype)
		}
	}
	// One access line per request, including the unclean paths.
	if n := strings.Count(logs.String(), `"msg":"http request"`); n < 21 {
		t.Errorf("%d access lines for 21 requests", n)
	}
	if !strings.Contains(logs.String(), `"path":"//api/admin/pool-stats"`) {
		t.Error("no access line for //api/admin/pool-stats")
	}
}
