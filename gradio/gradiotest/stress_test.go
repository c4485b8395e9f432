package gradiotest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestStress runs many sessions at once, each with a plain call, a generator
// and two State calls multiplexed on one stream, under the race detector.
func TestStress(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) { s.DefaultConcurrencyLimit = 8 })
	const sessions = 40
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sess := fmt.Sprint("stress-", i)
			join(t, s, sess, 0, fmt.Sprint("w", i))
			join(t, s, sess, 1, 3)
			join(t, s, sess, 3, "a", nil)
			seen := map[string]bool{}
			for try := 0; len(seen) < 3 && try < 5; try++ {
				for _, r := range stream(t, data(s, sess)) {
					if r.msg() == "process_completed" {
						seen[string(field(t, field(t, r.data, "output"), "data"))] = true
					}
				}
			}
			for _, want := range []string{fmt.Sprintf(`["W%d"]`, i), `["0 1 2"]`, `["1 items: a",null]`} {
				if !seen[want] {
					errs <- fmt.Errorf("session %d: no %s in %v", i, want, seen)
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := s.Executions("upper"); n != sessions {
		t.Errorf("upper ran %d times, want %d", n, sessions)
	}
}

// FuzzJoinBody checks that no request body makes queue/join panic or answer
// outside Gradio's statuses.
func FuzzJoinBody(f *testing.F) {
	for _, seed := range []string{``, `{`, `[]`, `null`, `{"data":null}`, `{"data":[],"fn_index":-1,"session_hash":"x"}`,
		`{"data":[1,2,3],"fn_index":0,"session_hash":"x"}`, `{"data":{},"fn_index":0}`, `{"fn_index":1e99}`,
		`{"data":["a"],"fn_index":3,"session_hash":5}`, "\x00\xff"} {
		f.Add(seed)
	}
	s := gradiotest.NewUnstartedServer(nil)
	s.StepDelay = -1
	s.Start()
	defer s.Close()
	f.Fuzz(func(t *testing.T, body string) {
		resp, err := http.Post(s.URL+"/gradio_api/queue/join", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case 200, 400, 422, 500, 503:
		default:
			t.Errorf("body %q: status %d", body, resp.StatusCode)
		}
		if resp.StatusCode == 500 && !strings.Contains(body, "fn_index") {
			t.Errorf("body %q: 500 without an fn_index", body)
		}
	})
}
