package diff_test

import (
	"encoding/json"
	"testing"

	"github.com/gradiopool/gradiopool/internal/diff"
)

func TestApply(t *testing.T) {
	tests := []struct {
		name, prev, edits, want string
		wantErr                 bool
	}{
		{"append root", `"Hello"`, `[["append",[],", w"]]`, `"Hello, w"`, false},
		{"replace root", `"a"`, `[["replace",[],3]]`, `3`, false},
		{"unchanged", `[1,2]`, `[]`, `[1,2]`, false},
		{"nested append", `[["How are you?","I am"]]`, `[["append",[0,1]," fine"]]`, `[["How are you?","I am fine"]]`, false},
		{"dict append and add", `[{"role":"assistant","content":"Hi"}]`,
			`[["append",[0,"content"]," there"],["add",[0,"metadata"],{"title":null}]]`,
			`[{"role":"assistant","content":"Hi there","metadata":{"title":null}}]`, false},
		{"list add", `[1,2]`, `[["add",[2],3],["add",[0],0]]`, `[0,1,2,3]`, false},
		{"list delete renumbered", `[1,2,3,4,5]`, `[["delete",[3],null],["delete",[3],null]]`, `[1,2,3]`, false},
		{"dict delete", `{"a":1,"b":2}`, `[["delete",["a"],null]]`, `{"b":2}`, false},
		{"nested delete quirk", `[[1,2,3]]`, `[["delete",[0,1],null],["delete",[0,0],null]]`, `[[3]]`, false},
		{"replace in dict", `{"a":{"b":1}}`, `[["replace",["a","b"],2]]`, `{"a":{"b":2}}`, false},
		{"append list", `{"a":[1]}`, `[["append",["a"],[2]]]`, `{"a":[1,2]}`, false},
		{"from null", `null`, `[["replace",[],"x"]]`, `"x"`, false},
		{"append to null", `null`, `[["append",[],"x"]]`, `"x"`, false},
		{"index out of range", `[1]`, `[["replace",[5],1]]`, ``, true},
		{"walk into scalar", `1`, `[["replace",[0,1],1]]`, ``, true},
		{"bad action", `[1]`, `[["frob",[0],1]]`, ``, true},
		{"string key on list", `[1]`, `[["replace",["a"],1]]`, ``, true},
		{"delete root", `[1]`, `[["delete",[],null]]`, ``, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var prev any
			if err := json.Unmarshal([]byte(tt.prev), &prev); err != nil {
				t.Fatal(err)
			}
			prevCopy, _ := json.Marshal(prev)
			edits, err := diff.Parse([]byte(tt.edits))
			if err != nil {
				t.Fatal(err)
			}
			got, err := diff.Apply(prev, edits)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error, got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a, b := canon(t, got), canon(t, mustAny(t, tt.want)); a != b {
				t.Fatalf("got %s, want %s", a, b)
			}
			if after, _ := json.Marshal(prev); string(after) != string(prevCopy) {
				t.Fatalf("prev modified: %s -> %s", prevCopy, after)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{`{}`, `[1]`, `[["a",[]]]`, `[[1,[],2]]`, `[["a",1,2]]`} {
		if _, err := diff.Parse([]byte(s)); err == nil {
			t.Errorf("Parse(%s) succeeded", s)
		}
	}
	if !diff.IsEditList([]byte(`[["append",[],"x"]]`)) || !diff.IsEditList([]byte(`[]`)) || diff.IsEditList([]byte(`["x"]`)) {
		t.Error("IsEditList")
	}
}

func mustAny(t *testing.T, s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func canon(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	json.Unmarshal(b, &x)
	b, _ = json.Marshal(x)
	return string(b)
}

func FuzzApply(f *testing.F) {
	f.Add(`[["x",""]]`, `[["append",[0,1],"y"],["add",[1],{"a":1}],["delete",[0],null]]`)
	f.Add(`"Hello"`, `[["append",[],", w"]]`)
	f.Add(`{"a":[1,2,3]}`, `[["delete",["a",2],null],["replace",["a",0],"z"]]`)
	f.Fuzz(func(t *testing.T, prev, edits string) {
		var p any
		if json.Unmarshal([]byte(prev), &p) != nil {
			return
		}
		es, err := diff.Parse([]byte(edits))
		if err != nil {
			return
		}
		_, _ = diff.Apply(p, es) // must not panic
	})
}
