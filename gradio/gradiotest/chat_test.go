package gradiotest_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// applyDiff applies Gradio generator edits the way both official clients do.
func applyDiff(t *testing.T, v any, edits []any) any {
	t.Helper()
	for _, e := range edits {
		ed := e.([]any)
		action, path, value := ed[0].(string), ed[1].([]any), ed[2]
		if len(path) == 0 {
			switch action {
			case "replace":
				v = value
			case "append":
				v = v.(string) + value.(string)
			}
			continue
		}
		parent := v
		for _, k := range path[:len(path)-1] {
			switch p := parent.(type) {
			case []any:
				parent = p[int(k.(float64))]
			case map[string]any:
				parent = p[k.(string)]
			}
		}
		last := path[len(path)-1]
		set := func(nv any) {
			switch p := parent.(type) {
			case []any:
				p[int(last.(float64))] = nv
			case map[string]any:
				p[last.(string)] = nv
			}
		}
		get := func() any {
			switch p := parent.(type) {
			case []any:
				return p[int(last.(float64))]
			case map[string]any:
				return p[last.(string)]
			}
			return nil
		}
		switch action {
		case "replace":
			set(value)
		case "append":
			set(get().(string) + value.(string))
		case "add", "delete":
			if m, ok := parent.(map[string]any); ok {
				if action == "add" {
					m[last.(string)] = value
				} else {
					delete(m, last.(string))
				}
				continue
			}
			// lists are spliced in place: rebuild through the grandparent
			v = spliceAt(t, v, path, action, value)
		}
	}
	return v
}

// spliceAt inserts or removes a list element at path, returning the new root.
func spliceAt(t *testing.T, root any, path []any, action string, value any) any {
	if len(path) == 1 {
		l := root.([]any)
		i := int(path[0].(float64))
		if action == "add" {
			l = append(l[:i], append([]any{value}, l[i:]...)...)
		} else {
			l = append(l[:i], l[i+1:]...)
		}
		return l
	}
	switch p := root.(type) {
	case []any:
		i := int(path[0].(float64))
		p[i] = spliceAt(t, p[i], path[1:], action, value)
	case map[string]any:
		k := path[0].(string)
		p[k] = spliceAt(t, p[k], path[1:], action, value)
	}
	return root
}

func TestChatAppDiffsRoundTrip(t *testing.T) {
	chat := newServer(t, gradiotest.ChatApp())
	for turn, msg := range []string{"hello there", "and again"} {
		join(t, chat, "chat", 0, msg, nil)
		var cur []any
		var final []any
		n := 0
		for _, r := range stream(t, data(chat, "chat")) {
			var out struct {
				Data []any `json:"data"`
			}
			_ = json.Unmarshal(field(t, r.data, "output"), &out)
			switch r.msg() {
			case "process_generating":
				if cur == nil {
					cur = out.Data
				} else {
					for i := range cur {
						cur[i] = applyDiff(t, cur[i], out.Data[i].([]any))
					}
				}
				n++
			case "process_completed":
				final = out.Data
			}
		}
		if n < 3 || !reflect.DeepEqual(cur, final) {
			t.Errorf("turn %d: applying %d diffs gave\n%v\nwant\n%v", turn, n, cur, final)
		}
		if msgs := final[0].([]any); len(msgs) != 2*(turn+1) {
			t.Errorf("turn %d: %d messages, want %d (history in gr.State)", turn, len(msgs), 2*(turn+1))
		}
	}
	join(t, chat, "echo", 1, map[string]any{"a": []any{1, "x"}})
	recs := stream(t, data(chat, "echo"))
	if got := string(field(t, field(t, recs[2].data, "output"), "data")); got != `[{"a":[1,"x"]}]` {
		t.Errorf("echo %s", got)
	}
}
