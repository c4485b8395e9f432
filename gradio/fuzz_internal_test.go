package gradio

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzMessage feeds queue/data records (seeded from the captured
// transcripts) through decoding and a job's message handling: nothing may
// panic, and a record either decodes or is rejected.
func FuzzMessage(f *testing.F) {
	files, _ := filepath.Glob("testdata/transcripts/*.txt")
	for _, p := range files {
		fh, err := os.Open(p)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "  | data: "); ok && strings.HasPrefix(d, "{") {
				f.Add([]byte(d), []byte(`{"msg":"process_generating","event_id":"e","output":{"data":[[["append",[]," x"]]]},"success":true}`))
			}
		}
		fh.Close()
	}
	cfg, err := ParseConfig([]byte(`{"version":"5.49.1","protocol":"sse_v3","api_prefix":"/gradio_api","app_id":1,
	"components":[{"id":1,"type":"textbox"},{"id":2,"type":"state","skip_api":true},{"id":3,"type":"json"}],
	"dependencies":[{"id":0,"api_name":"x","inputs":[1,2],"outputs":[3,2],"backend_fn":true,"types":{"generator":true}}]}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		a := &app{cfg: cfg, set: defaultSettings()}
		s := newSession(a)
		j := newJob(s, context.Background(), &cfg.Dependencies[0], "x", jobOpts{})
		j.id = "e"
		s.pending["e"] = j
		defer func() {
			// This app has no HTTP client: Close must not try to
			// cancel the job at it.
			s.mu.Lock()
			delete(s.pending, "e")
			s.mu.Unlock()
			s.close()
		}()
		for _, b := range [][]byte{first, second} {
			m, err := decodeMessage(b)
			if err != nil {
				continue
			}
			m.EventID = &j.id
			s.mu.Lock()
			j.handle(m)
			s.mu.Unlock()
		}
	})
}

func TestPrepareArgsURLAndNested(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"version":"5.0.0","protocol":"sse_v3","components":[],"dependencies":[]}`))
	s := newSession(&app{cfg: cfg, set: defaultSettings()})
	defer s.close()
	in := []any{FileURL("https://h/a/b.png?x=1"), map[string]any{"k": FileData{Path: "/tmp/x"}}, "plain"}
	out, changed, err := s.prepareArgs(context.Background(), "ep", in)
	if err != nil || !changed {
		t.Fatalf("prepareArgs: %v %v", changed, err)
	}
	b, _ := json.Marshal(out)
	want := `[{"path":"https://h/a/b.png?x=1","orig_name":"b.png","meta":{"_type":"gradio.FileData"}},{"k":{"path":"/tmp/x","meta":{"_type":"gradio.FileData"}}},"plain"]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	plain := []any{"a", map[string]any{"b": 1}}
	if _, changed, _ := s.prepareArgs(context.Background(), "ep", plain); changed {
		t.Error("plain values reported as changed")
	}
}
