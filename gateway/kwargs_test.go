package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestKeywordArguments: "data" may be an object of the inputs by parameter
// name, as gradio.Kwargs is in the library; left-out parameters take the
// app's defaults, unknown names are the caller's fault.
func TestKeywordArguments(t *testing.T) {
	srv, _, _ := realGateway(t, 1, nil)
	for _, tc := range []struct {
		name, path, body string
		status           int
		contains         string
	}{
		{"by name", "/v1/predict/upper", `{"data":{"text":"hi"}}`, 200, `"data":["HI"]`},
		{"parameter_name, not label", "/v1/predict/counter", `{"data":{"text":"a"}}`, 200, `"data":[`},
		{"defaults fill the rest", "/v1/predict/count", `{"data":{}}`, 200, `"data":["0 1 2 3 4"]`},
		{"given beats default", "/v1/predict/count", `{"data":{"n":2}}`, 200, `"data":["0 1"]`},
		{"unknown name", "/v1/predict/upper", `{"data":{"nope":"x"}}`, 400, `"code":"bad_arguments"`},
		{"missing required", "/v1/predict/upper", `{"data":{}}`, 400, `"code":"bad_arguments"`},
		{"not an object or list", "/v1/predict/upper", `{"data":"hi"}`, 400, `"code":"bad_json"`},
		{"broken object", "/v1/predict/upper", `{"data":{"text":}}`, 400, `"code":"bad_json"`},
		{"list still works", "/v1/predict/upper", `{"data":["hi"]}`, 200, `"data":["HI"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", srv.URL+tc.path, tc.body)
			if a.status != tc.status || !strings.Contains(a.body, tc.contains) {
				t.Fatalf("%s %s: %d %s, want %d containing %s", tc.path, tc.body, a.status, a.body, tc.status, tc.contains)
			}
		})
	}
	t.Run("submit", func(t *testing.T) {
		resp, err := http.Post(srv.URL+"/v1/submit/count", "application/json", strings.NewReader(`{"data":{"n":3}}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		names, data, _ := sseRecords(t, resp.Body)
		// The number of partial outputs the stream shows depends on timing;
		// n=3 shows in the final answer.
		if j := strings.Join(names, " "); !strings.HasPrefix(j, "accepted") || !strings.HasSuffix(j, "output complete") || !strings.Contains(data[len(data)-1], `"0 1 2"`) {
			t.Fatalf("%q %q", j, data)
		}
	})
	t.Run("gradio_api/call", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/gradio_api/call/upper", `{"data":{"text":"rest"}}`)
		var ev struct {
			EventID string `json:"event_id"`
		}
		if a.status != 200 || json.Unmarshal([]byte(a.body), &ev) != nil || ev.EventID == "" {
			t.Fatalf("%d %s", a.status, a.body)
		}
		g := do(t, "GET", srv.URL+"/gradio_api/call/upper/"+ev.EventID, "")
		if !strings.Contains(g.body, "event: complete") || !strings.Contains(g.body, `"REST"`) {
			t.Fatalf("%d %s", g.status, g.body)
		}
	})
}
