package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
)

// Regression (issue 16, defect 6): X-Gradiopool-Timeout was ignored, and
// garbage accepted, on POST /gradio_api/call; 1e300 overflowed to "must be
// positive".
func TestTimeoutHeader(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, nil)
	for _, tc := range []struct {
		name, path, value string
		status            int
		msg               string
	}{
		{"garbage on predict", "/v1/predict/upper", "soon", 400, "neither"},
		{"garbage on the REST shape", "/gradio_api/call/upper", "soon", 400, "neither"},
		{"huge seconds", "/v1/predict/upper", "1e300", 400, "maximum"},
		{"huge duration", "/v1/predict/upper", "9000000h", 400, "neither"},
		{"NaN", "/v1/predict/upper", "NaN", 400, "positive"},
		{"negative", "/gradio_api/call/upper", "-1", 400, "positive"},
		{"too long", "/v1/predict/upper", strings.Repeat("9", 5000), 400, "characters"},
		{"seconds", "/v1/predict/upper", "2.5", 200, ""},
		{"duration on the REST shape", "/gradio_api/call/upper", "2s", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", srv.URL+tc.path, `{"data":["a"]}`, gateway.TimeoutHeader, tc.value)
			if a.status != tc.status {
				t.Fatalf("%.40s: %d %.300s, want %d", tc.value, a.status, a.body, tc.status)
			}
			if tc.status != 200 && (errorCode(t, a.body) != "bad_timeout" || !strings.Contains(a.body, tc.msg) || len(a.body) > 400) {
				t.Fatalf("%.40s: %.300s", tc.value, a.body)
			}
		})
	}
	t.Run("deadline on the REST shape", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/gradio_api/call/slow", `{"data":[]}`, gateway.TimeoutHeader, "50ms")
		var ev struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal([]byte(a.body), &ev); err != nil || ev.EventID == "" {
			t.Fatal(a.status, a.body)
		}
		<-f.started
		defer close(f.release) // without the deadline the call would run on
		hc := &http.Client{Timeout: 10 * time.Second}
		resp, err := hc.Get(srv.URL + "/gradio_api/call/slow/" + ev.EventID)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		names, data, _ := sseRecords(t, resp.Body)
		if len(names) == 0 || names[len(names)-1] != "error" || !strings.Contains(data[len(data)-1], `"code":"deadline_exceeded"`) {
			t.Fatalf("records %.200v %.300v", names, data)
		}
	})
}
