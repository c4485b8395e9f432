package gradiotest_test

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// TestMatchesCapture compares /config and /info of the default server with
// the bodies real Gradio 5.49.1 sent for the same app (testdata/capture,
// copied from the project's transcripts). Only values that differ per run or
// per app instance are ignored.
func TestMatchesCapture(t *testing.T) {
	s := newServer(t, nil)
	load := func(path string) map[string]any {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	want := load("testdata/capture/config_gradio-5.49.1.json")
	var got map[string]any
	getJSON(t, s.URL+"/config", &got)
	for _, k := range []string{"app_id", "root", "title", "stylesheets"} {
		delete(want, k)
		delete(got, k)
	}
	for k := range want {
		if !reflect.DeepEqual(want[k], got[k]) {
			g, _ := json.Marshal(got[k])
			w, _ := json.Marshal(want[k])
			t.Errorf("config %s\n got %.300s\nwant %.300s", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("config has extra key %s", k)
		}
	}
	wantInfo := load("testdata/capture/info_gradio-5.49.1.json")
	var gotInfo map[string]any
	getJSON(t, api(s)+"/info", &gotInfo)
	if !reflect.DeepEqual(wantInfo, gotInfo) {
		g, _ := json.Marshal(gotInfo)
		t.Errorf("info differs from the capture:\n%.2000s", g)
	}
}
