package gradiotest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func TestLegacyModes(t *testing.T) {
	cases := []struct {
		mode      gradiotest.Mode
		protocol  string
		version   string
		closeMsg  bool   // sends close_stream
		diffs     bool   // generator diffs
		meta      bool   // FileData meta
		depID     bool   // dependencies carry id
		countLast string // final count completion data
	}{
		{gradiotest.Gradio4SSEv3, "sse_v3", "4.44.1", true, true, true, true, `["0 1 2"]`},
		{gradiotest.Gradio4SSEv21, "sse_v2.1", "4.21.0", false, true, true, false, `["0 1 2"]`},
		{gradiotest.Gradio4SSEv2, "sse_v2", "4.20.1", false, true, false, false, `["0 1 2"]`},
		{gradiotest.Gradio4SSEv1, "sse_v1", "4.16.0", false, false, false, false, `["0 1 2"]`},
	}
	for _, c := range cases {
		t.Run(string(c.mode), func(t *testing.T) {
			s := newServer(t, nil, func(s *gradiotest.Server) { s.Mode = c.mode })
			var cfg map[string]any
			getJSON(t, s.URL+"/config", &cfg)
			if cfg["protocol"] != c.protocol || cfg["version"] != c.version {
				t.Errorf("config %v %v", cfg["protocol"], cfg["version"])
			}
			if _, ok := cfg["api_prefix"]; ok {
				t.Errorf("4.x config has api_prefix")
			}
			dep := cfg["dependencies"].([]any)[0].(map[string]any)
			if _, ok := dep["id"]; ok != c.depID {
				t.Errorf("dependency id present=%v, want %v", ok, c.depID)
			}
			if st := getJSON(t, s.URL+"/gradio_api/info", nil); st != 404 {
				t.Errorf("prefixed route answered %d", st)
			}
			var info map[string]any
			if getJSON(t, s.URL+"/info", &info) != 200 {
				t.Errorf("no /info")
			}

			join(t, s, "u", 0, "hello")
			recs := stream(t, s.URL+"/queue/data?session_hash=u")
			want := []string{"estimation", "process_starts", "process_completed"}
			if c.closeMsg {
				want = append(want, "close_stream")
			}
			if got := msgs(recs); !slices.Equal(got, want) {
				t.Errorf("messages %v, want %v", got, want)
			}
			if !strings.HasPrefix(string(recs[0].data), `{"msg": "estimation", "event_id": "`) {
				t.Errorf("not Python json.dumps style: %s", recs[0].data)
			}
			if got := keys(t, recs[2].data); !slices.Equal(got, []string{"msg", "event_id", "output", "success"}) {
				t.Errorf("completion keys %v", got)
			}
			if got := keys(t, field(t, recs[2].data, "output")); !slices.Equal(got, []string{"data", "is_generating", "duration", "average_duration"}) {
				t.Errorf("output keys %v", got)
			}

			join(t, s, "g", 1, 3)
			var gen []string
			var last record
			for _, r := range stream(t, s.URL+"/queue/data?session_hash=g") {
				if r.msg() == "process_generating" {
					gen = append(gen, string(field(t, field(t, r.data, "output"), "data")))
				}
				if r.msg() == "process_completed" {
					last = r
				}
			}
			wantGen := []string{`["0"]`, `["0 1"]`, `["0 1 2"]`}
			if c.diffs {
				wantGen = []string{`["0"]`, `[[["append", [], " 1"]]]`, `[[["append", [], " 2"]]]`}
			}
			if !slices.Equal(gen, wantGen) {
				t.Errorf("generating %v, want %v", gen, wantGen)
			}
			if got := string(field(t, field(t, last.data, "output"), "data")); got != c.countLast {
				t.Errorf("final %s", got)
			}

			st, b := upload(t, s, "in.txt", []byte("abc"))
			var paths []string
			_ = json.Unmarshal(b, &paths)
			if st != 200 || len(paths) != 1 {
				t.Fatalf("upload %d %s", st, b)
			}
			in := map[string]any{"path": paths[0], "orig_name": "in.txt"}
			if c.meta {
				in["meta"] = map[string]any{"_type": "gradio.FileData"}
			}
			join(t, s, "f", 5, in)
			recs = stream(t, s.URL+"/queue/data?session_hash=f")
			out := string(field(t, recs[2].data, "output"))
			if strings.Contains(out, `"meta"`) != c.meta || !strings.Contains(out, `"url": "`+s.URL+`/file=`) {
				t.Errorf("file output %s", out)
			}

			join(t, s, "e", 4, "boom")
			recs = stream(t, s.URL+"/queue/data?session_hash=e")
			// str(gr.Error) is repr(message) in Gradio 4 (the 4.8-4.20
			// captures, real 4.44.1); 4.44 adds duration and visible.
			wantErr := `{"error": "\"deliberate failure for input 'boom'\""}`
			if c.mode == gradiotest.Gradio4SSEv3 {
				wantErr = `{"error": "\"deliberate failure for input 'boom'\"", "duration": 10, "visible": true}`
			}
			if got := string(field(t, recs[2].data, "output")); got != wantErr {
				t.Errorf("error output %s, want %s", got, wantErr)
			}
		})
	}
}

func TestLegacyHeartbeat(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) {
		s.Mode = gradiotest.Gradio4SSEv2
		s.HeartbeatInterval = 10 * time.Millisecond
		s.TimeScale = 0.3
	})
	join(t, s, "hb", 2, 1)
	found := false
	for _, r := range stream(t, s.URL+"/queue/data?session_hash=hb") {
		if r.msg() == "heartbeat" {
			found = true
			if string(r.data) != `{"msg": "heartbeat"}` {
				t.Errorf("4.x heartbeat %s", r.data)
			}
		}
	}
	if !found {
		t.Errorf("no heartbeat")
	}
}

func TestSSEv0(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) { s.Mode = gradiotest.Gradio4SSE })
	var cfg map[string]any
	getJSON(t, s.URL+"/config", &cfg)
	if cfg["protocol"] != "sse" || cfg["version"] != "4.8.0" {
		t.Fatalf("config %v %v", cfg["protocol"], cfg["version"])
	}
	run := func(fn int, session string, payload []any) []record {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/queue/join?fn_index="+string(rune('0'+fn))+"&session_hash="+session, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		var recs []record
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return recs
			}
			line = strings.TrimRight(line, "\n")
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			r := record{data: []byte(strings.TrimPrefix(line, "data: "))}
			_ = json.Unmarshal(r.data, &r.m)
			recs = append(recs, r)
			if r.msg() == "send_data" {
				body := map[string]any{"event_id": r.m["event_id"], "data": payload, "fn_index": fn, "session_hash": session}
				var out any
				if st := postJSON(t, s.URL+"/queue/data", body, &out); st != 200 || out != nil {
					t.Errorf("POST queue/data: %d %v", st, out)
				}
			}
		}
	}
	recs := run(0, "v0", []any{"hello"})
	if got := msgs(recs); !slices.Equal(got, []string{"estimation", "send_data", "process_starts", "process_completed"}) {
		t.Fatalf("v0 messages %v", got)
	}
	if got := keys(t, recs[0].data); !slices.Equal(got, []string{"msg", "rank", "queue_size", "avg_event_process_time", "avg_event_concurrent_process_time", "rank_eta", "queue_eta"}) {
		t.Errorf("v0 estimation keys %v", got)
	}
	if string(recs[2].data) != `{"msg": "process_starts"}` {
		t.Errorf("v0 process_starts %s", recs[2].data)
	}
	if got := string(field(t, field(t, recs[3].data, "output"), "data")); got != `["HELLO"]` {
		t.Errorf("v0 result %s", got)
	}
	recs = run(1, "v0", []any{2})
	if got := msgs(recs); !slices.Equal(got, []string{"estimation", "send_data", "process_starts", "process_generating", "process_generating", "process_completed"}) {
		t.Errorf("v0 generator %v", got)
	}
	// gr.State survives across v0 events of one session
	run(3, "v0s", []any{"a", nil})
	recs = run(3, "v0s", []any{"b", nil})
	if got := string(field(t, field(t, recs[len(recs)-1].data, "output"), "data")); got != `["2 items: a, b", null]` {
		t.Errorf("v0 state %s", got)
	}
	s.SetQueueFull(true)
	recs = run(0, "full", nil)
	if len(recs) != 1 || string(recs[0].data) != `{"msg": "queue_full"}` {
		t.Errorf("v0 queue full: %v", msgs(recs))
	}
}

func TestSSEv0SendDataTimeout(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) {
		s.Mode = gradiotest.Gradio4SSE
		s.TimeScale = 0.01 // the 5 s wait for the data becomes 50 ms
	})
	recs := stream(t, s.URL+"/queue/join?fn_index=0&session_hash=late")
	if got := msgs(recs); !slices.Equal(got, []string{"estimation", "send_data"}) {
		t.Errorf("messages %v", got)
	}
	if s.Executions("upper") != 0 {
		t.Errorf("the event ran without data")
	}
}
