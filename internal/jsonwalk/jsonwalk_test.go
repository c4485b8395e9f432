package jsonwalk_test

import (
	"encoding/json"
	"testing"

	"github.com/gradiopool/gradiopool/internal/jsonwalk"
)

func TestReplace(t *testing.T) {
	var x any
	if err := json.Unmarshal([]byte(`{"a":[1,{"f":"x"},{"g":{"f":"y"}}],"f":"top-level objects are taken too"}`), &x); err != nil {
		t.Fatal(err)
	}
	take := func(m map[string]any) (any, bool) {
		if s, ok := m["f"].(string); ok && len(m) == 1 {
			return "file:" + s, true
		}
		return nil, false
	}
	got, changed := jsonwalk.Replace(x, take)
	b, _ := json.Marshal(got)
	if want := `{"a":[1,"file:x",{"g":"file:y"}],"f":"top-level objects are taken too"}`; string(b) != want || !changed {
		t.Errorf("got %s %v, want %s true", b, changed, want)
	}
	got, changed = jsonwalk.Replace([]any{1.0, "s", nil}, take)
	if b, _ := json.Marshal(got); string(b) != `[1,"s",null]` || changed {
		t.Errorf("nothing to take: got %s %v", b, changed)
	}
}
