package gradiotest_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// recordedJoins is gradio/testdata/joins/bad_joins.json: what real Gradio
// answers to joins with bad input, per release.
type recordedJoins struct {
	Cases []struct {
		Name    string         `json:"name"`
		Path    string         `json:"path"`
		Request map[string]any `json:"request"`
		Answers map[string]struct {
			Status       int    `json:"status"`
			ContentType  string `json:"content_type"`
			Body         string `json:"body"`
			BodyContains string `json:"body_contains"`
		} `json:"answers"`
		Outcome string `json:"outcome"`
		FnKnown bool   `json:"fn_known"`
	} `json:"cases"`
}

func loadRecordedJoins(t *testing.T) recordedJoins {
	t.Helper()
	b, err := os.ReadFile("../testdata/joins/bad_joins.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec recordedJoins
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Cases) == 0 {
		t.Fatal("no recorded cases")
	}
	return rec
}

// TestBadJoinsAsRecorded: the simulator answers bad joins (unknown
// fn_index, unknown api name, missing or malformed fields, too few
// arguments) as the recorded Gradio release of its mode does: status,
// content type and body.
func TestBadJoinsAsRecorded(t *testing.T) {
	rec := loadRecordedJoins(t)
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio4SSEv3, gradiotest.Gradio5, gradiotest.Gradio6} {
		s := newServer(t, nil, func(s *gradiotest.Server) { s.Mode = mode })
		var raw json.RawMessage
		getJSON(t, s.URL+"/config", &raw)
		cfg, err := gradio.ParseConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		counter, err := cfg.Endpoint("counter")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rec.Cases {
			want, ok := c.Answers[mode.Version()]
			if !ok {
				t.Fatalf("%s: nothing recorded for %s", c.Name, mode.Version())
			}
			t.Run(string(mode)+"/"+c.Name, func(t *testing.T) {
				req := map[string]any{}
				for k, v := range c.Request {
					req[k] = v
				}
				if req["fn_index"] == "counter" {
					req["fn_index"] = counter.FnIndex
				}
				st, h, b := do(t, "POST", api(s)+"/"+c.Path, "application/json", mustJSON(t, req))
				if st != want.Status {
					t.Errorf("status %d, want %d (%s)", st, want.Status, b)
				}
				if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, want.ContentType) {
					t.Errorf("content type %q, want %q", ct, want.ContentType)
				}
				if want.Body != "" && string(b) != want.Body {
					t.Errorf("body\n%s\nwant\n%s", b, want.Body)
				}
				if !strings.Contains(string(b), want.BodyContains) {
					t.Errorf("body %s, want it to contain %s", b, want.BodyContains)
				}
			})
		}
	}
}
