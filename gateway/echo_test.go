package gateway_test

import (
	"strings"
	"testing"
)

// Regression (issue 16, defect 6): error messages echoed a 5000-character
// api name in full; so did the access log.
func TestLongNamesAreNotEchoed(t *testing.T) {
	_, srv, logs := newGateway(t, newFake(), nil)
	long := strings.Repeat("n", 5000)
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"POST", "/v1/predict/" + long, 400},
		{"POST", "/v1/submit/" + long, 400},
		{"POST", "/gradio_api/call/" + long, 400},
		{"GET", "/" + long, 404},
		{"GET", "/v1/predict/" + long, 405},
	} {
		a := do(t, tc.method, srv.URL+tc.path, `{"data":[]}`)
		if a.status != tc.status || len(a.body) > 600 {
			t.Errorf("%s %.30s...: %d, %d bytes: %.200s", tc.method, tc.path, a.status, len(a.body), a.body)
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2000 {
			t.Errorf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
}
