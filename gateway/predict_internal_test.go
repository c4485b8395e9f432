package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
)

// TestWritePredictionIsTheMarshalledAnswer: the answer written piece by
// piece decodes to what json.Marshal of the same map gave, and its
// Content-Length is its length.
func TestWritePredictionIsTheMarshalledAnswer(t *testing.T) {
	cases := [][]json.RawMessage{
		nil,
		{},
		{json.RawMessage(`"HELLO"`)},
		{json.RawMessage(`1`), nil, json.RawMessage(` {"a": [1, 2], "b": "<&>"} `), json.RawMessage(`null`)},
	}
	for i, data := range cases {
		for _, replica := range []string{"r1", `odd "name" é`} {
			rec := httptest.NewRecorder()
			writePrediction(rec, data, replica, 1234)
			body := rec.Body.Bytes()
			if got, want := rec.Header().Get("Content-Length"), strconv.Itoa(len(body)); got != want {
				t.Errorf("case %d: Content-Length %s, body %d bytes", i, got, len(body))
			}
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("case %d: %d %q", i, rec.Code, rec.Header().Get("Content-Type"))
			}
			want, err := json.Marshal(map[string]any{"data": nonNil(data), "replica": replica, "duration_ms": 1234})
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			var g, w any
			if err := json.Unmarshal(body, &g); err != nil {
				t.Fatalf("case %d: the answer is not JSON: %v\n%s", i, err, body)
			}
			_ = json.Unmarshal(want, &w)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("case %d: got %s, want %s", i, body, want)
			}
			if !bytes.HasSuffix(body, []byte("}\n")) {
				t.Errorf("case %d: the answer does not end in a newline: %q", i, body)
			}
		}
	}
}

// BenchmarkPredictAnswer: /v1/predict's answer carrying one 32 MB
// output (abuse row 10's size), written piece by piece against the
// json.Marshal of a map it replaced.
func BenchmarkPredictAnswer(b *testing.B) {
	out, _ := json.Marshal(string(bytes.Repeat([]byte("x"), 32<<20)))
	data := []json.RawMessage{out}
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeJSON(discard{}, http.StatusOK, map[string]any{"data": data, "replica": "r1", "duration_ms": 1})
		}
	})
	b.Run("written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writePrediction(discard{}, data, "r1", 1)
		}
	})
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}
