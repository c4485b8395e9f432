package frontdoor_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// asUser serves the gateway behind a proxy that names user in every
// request (X-Gradiopool-User): the official client's sessions of one
// conformance run are then pinned to the user's replica.
func asUser(t *testing.T, gw, user string) string {
	t.Helper()
	u, _ := url.Parse(gw)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // the app's root stays the proxy's: the client's next requests come here
			pr.Out.Header.Set(frontdoor.UserHeader, user)
		},
		FlushInterval: -1, // SSE streams pass as they come
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// conformanceMust runs conformance.mjs against base and fails the test
// for each check of must that did not pass.
func conformanceMust(t *testing.T, base string, must []string, args ...string) {
	t.Helper()
	got := map[string]fdtest.JSCheck{}
	for _, c := range fdtest.RunNode(t, "conformance.mjs", append([]string{base, "--sticky-header", frontdoor.UserHeader + ": conformance@example.com"}, args...)...) {
		got[c.Name] = c
		if !c.OK && !c.Skipped {
			t.Logf("check %s fails: %s", c.Name, c.Detail)
		}
	}
	for _, m := range must {
		if c, ok := got[m]; !ok || !c.OK || c.Skipped {
			t.Errorf("check %s did not pass through the gateway over a mixed replica set: %s", m, c.Detail)
		}
	}
}

// TestFrontDoorMixedGenerations: a replica set mixing Gradio 5 (relayed),
// 4.16 (sse_v1) and 3.50 (ws), both bridged, replicas of one app, is ONE
// Gradio 5 app through the front door: the official JS client's
// conformance suite passes with its sessions bound to each kind of
// replica (a run per user, each user pinned to a replica, until every
// replica served one), and with anonymous sessions whose stateless calls
// spread over all three.
func TestFrontDoorMixedGenerations(t *testing.T) {
	fdtest.NodeOrSkip(t)
	modes := []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv1, gradiotest.Gradio3WS}
	srv, fd, sims := newDoorModes(t, modes, nil, nil)
	// The reference (first in pool order) is relayed: its /info has
	// Gradio 5's parameter names, so the keyword checks pass too.
	must := append(slices.Clone(bridgeMust), "view_api")
	served := func() []string {
		var none []string
		for i, s := range sims {
			if s.Executions("counter") == 0 {
				none = append(none, string(modes[i]))
			}
		}
		return none
	}
	runs := 0
	for ; runs < 6 && len(served()) > 0; runs++ {
		conformanceMust(t, asUser(t, srv.URL, fmt.Sprintf("mix%d@example.com", runs)), must)
	}
	if none := served(); len(none) > 0 {
		t.Fatalf("after %d runs no session ran its gr.State calls on %v: %+v", runs, none, fd.Stats())
	}
	st := fd.Stats()
	for i, s := range sims {
		if st.Pinned[fdtest.ReplicaName(s)] == 0 {
			t.Errorf("no caller session bound to the %s replica: %+v", modes[i], st.Pinned)
		}
	}
	before := make([]int, len(sims))
	for i, s := range sims {
		before[i] = s.Executions("upper")
	}
	conformanceMust(t, srv.URL, must) // anonymous: stateless calls spread
	for i, s := range sims {
		if s.Executions("upper") == before[i] {
			t.Logf("the anonymous run ran no upper call on the %s replica", modes[i])
		}
	}
	if st := fd.Stats(); len(st.Mismatched) != 0 || st.Lost != 0 {
		t.Errorf("stats %+v: want no replica reported as another app, no call lost", st)
	}
	t.Logf("%d user runs; front door stats: %+v", runs, fd.Stats())
}

// TestFrontDoorMixedPrefixes: Gradio 4.44 (sse_v3, no API prefix) next to
// Gradio 5 (sse_v3 under /gradio_api): both relayed, one app for the
// callers (the reference's config, either way round), file URLs under the
// presented prefix whichever replica ran the call.
func TestFrontDoorMixedPrefixes(t *testing.T) {
	fdtest.NodeOrSkip(t)
	for _, c := range []struct {
		name  string
		modes []gradiotest.Mode
		args  []string
	}{
		{"gradio4.44 first", []gradiotest.Mode{gradiotest.Gradio4SSEv3, gradiotest.Gradio5}, []string{"--api-prefix", "", "--version-re", `^4\.`}},
		{"gradio5 first", []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv3}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, fd, sims := newDoorModes(t, c.modes, nil, nil)
			must := append(slices.Clone(bridgeMust), "view_api")
			for i := 0; i < 6 && (sims[0].Executions("counter") == 0 || sims[1].Executions("counter") == 0); i++ {
				conformanceMust(t, asUser(t, srv.URL, fmt.Sprintf("prefix%d@example.com", i)), must, c.args...)
			}
			for i, s := range sims {
				if s.Executions("counter") == 0 || s.Executions("reverse_file") == 0 {
					t.Errorf("the %s replica ran no session's gr.State or file call", c.modes[i])
				}
			}
			if st := fd.Stats(); len(st.Mismatched) != 0 {
				t.Errorf("stats %+v: want no replica reported as another app", st)
			}
		})
	}
}

// TestFrontDoorMixedFailover: a caller session bound to a replica of one
// generation whose replica dies goes on, on its next call, on the replica
// of the other generation (relayed to bridged and bridged to relayed): a
// fresh gr.State there, kept between its calls.
func TestFrontDoorMixedFailover(t *testing.T) {
	for _, c := range []struct {
		name  string
		modes []gradiotest.Mode
		kill  int // the mode whose replica dies
	}{
		{"gradio5 to gradio3-ws", []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio3WS}, 0},
		{"gradio3-ws to gradio5", []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio3WS}, 1},
		{"gradio4-sse_v1 to gradio4.44", []gradiotest.Mode{gradiotest.Gradio4SSEv1, gradiotest.Gradio4SSEv3}, 0},
		{"gradio4.44 to gradio4-sse_v1", []gradiotest.Mode{gradiotest.Gradio4SSEv1, gradiotest.Gradio4SSEv3}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, fd, sims := newDoorModes(t, c.modes, nil, nil)
			counter := fdtest.FnIndex(t, srv.URL, "counter")
			victim, other := sims[c.kill], sims[1-c.kill]
			// Sessions go to the replica that would end a call first
			// (ties round robin): bind new ones until one is on the victim.
			session := ""
			for i := range 8 {
				h := fmt.Sprintf("fo%d", i)
				n := victim.Executions("counter")
				if got := fdtest.Call(t, srv.URL, h, counter, "a", nil); got != "1 items: a" {
					t.Fatalf("first call of %s: %q", h, got)
				}
				if victim.Executions("counter") > n {
					session = h
					break
				}
			}
			if session == "" {
				t.Fatalf("no session was bound to the %s replica in 8", c.modes[c.kill])
			}
			if got := fdtest.Call(t, srv.URL, session, counter, "b", nil); got != "2 items: a, b" {
				t.Fatalf("second call on %s (gr.State kept): %q", c.modes[c.kill], got)
			}
			victim.Close() // the session's replica dies between its calls
			n := other.Executions("counter")
			// A join written on a kept-alive connection the dead replica
			// had closed gets no answer: it may have been taken, so the
			// gateway answers 502 and never runs it again (README,
			// Failover). The caller's next join then finds the replica
			// refusing and moves. Bounded: at most one such answer.
			var id string
			for attempt := 0; ; attempt++ {
				var err error
				if id, err = fdtest.Join(srv.URL, session, counter, "c", nil); err == nil {
					break
				}
				if attempt > 0 || !strings.Contains(err.Error(), "not run again") {
					t.Fatalf("join after the replica died (attempt %d): %v", attempt, err)
				}
				t.Logf("first join after the kill: %v", err)
			}
			res, err := fdtest.Stream(srv.URL, session)
			if err != nil {
				t.Fatal(err)
			}
			if out, _ := res[id]["output"].(map[string]any); res[id]["success"] != true || fmt.Sprint(out["data"]) != "[1 items: c <nil>]" {
				t.Fatalf("the call after the replica died: %v, want a fresh state on the %s replica", res[id], c.modes[1-c.kill])
			}
			if got := fdtest.Call(t, srv.URL, session, counter, "d", nil); got != "2 items: c, d" {
				t.Errorf("the next call on the %s replica (gr.State kept there): %q", c.modes[1-c.kill], got)
			}
			if d := other.Executions("counter") - n; d != 2 {
				t.Errorf("the %s replica ran %d of the session's calls after the failover, want 2", c.modes[1-c.kill], d)
			}
			st := fd.Stats()
			if st.Moved < 1 || st.StateLost < 1 || st.Pinned[fdtest.ReplicaName(other)] < 1 {
				t.Errorf("stats %+v: want the session moved to %s, its state counted lost", st, fdtest.ReplicaName(other))
			}
		})
	}
}

// TestFrontDoorMixedGenerationsMismatch: a replica on another generation
// whose endpoint differs (Gradio 3's /upper takes a number) is still
// another app: reported per replica, and no call runs there, while the
// replicas of the reference app on Gradio 5 and 4.16 serve every call.
func TestFrontDoorMixedGenerationsMismatch(t *testing.T) {
	other := gradiotest.NewApp()
	other.Handle("upper", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
		n, err := c.Float(0)
		return []any{fmt.Sprint(n * 2)}, err
	}, []gradiotest.Component{gradiotest.Number("n")}, []gradiotest.Component{gradiotest.Textbox("out")})
	modes := []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio3WS, gradiotest.Gradio4SSEv1}
	srv, fd, sims := newDoorModes(t, modes, []*gradiotest.App{nil, other, nil}, nil)
	odd := fdtest.ReplicaName(sims[1])
	fn := fdtest.FnIndex(t, srv.URL, "upper")
	const calls = 9
	for i := range calls {
		if got, want := fdtest.Call(t, srv.URL, fmt.Sprintf("mg%d", i), fn, fmt.Sprintf("x%d", i)), fmt.Sprintf("X%d", i); got != want {
			t.Errorf("call %d: %q, want %q", i, got, want)
		}
	}
	if n := sims[1].Executions("upper"); n != 0 {
		t.Errorf("the Gradio 3 replica with another app ran %d calls, want 0", n)
	}
	if a, c := sims[0].Executions("upper"), sims[2].Executions("upper"); a+c != calls || a == 0 || c == 0 {
		t.Errorf("the Gradio 5 and 4.16 replicas of the reference app ran %d and %d calls, want %d spread over both", a, c, calls)
	}
	var mm map[string]string
	for range 400 { // the background check of every replica; bounded wait
		if mm = fd.Stats().Mismatched; mm[odd] != "" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(mm) != 1 || !strings.Contains(mm[odd], "[number]") {
		t.Errorf("mismatched replicas %v, want only %s, with the differing input", mm, odd)
	}
}

// TestFrontDoorQueuedBridgedCall: a join that waits in the gateway's queue
// (every slot taken) and then runs on a bridged replica reaches its caller
// under the gateway's event id it was answered with: estimation while it
// waits, then its own run's messages, then close_stream.
func TestFrontDoorQueuedBridgedCall(t *testing.T) {
	gate := make(chan struct{})
	srv, fd, _ := newDoorModes(t, []gradiotest.Mode{gradiotest.Gradio4SSEv1}, []*gradiotest.App{fdtest.HoldApp(gate)}, func(c *config) {
		c.Pool.MaxConnections = 1
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, base, "hold")
	occ, err := fdtest.Join(base, "qb-occupier", hold, "o")
	if err != nil {
		t.Fatal(err)
	}
	occStream := fdtest.Messages(t, base, "qb-occupier")
	nextMsg(t, occStream, "process_starts", occ)
	// The occupier's own join may have waited too, under load, for the
	// pool's first session: only the waiter's is counted here.
	before := fd.Stats().Queued
	id, err := fdtest.Join(base, "qb-waiter", hold, "w")
	if err != nil {
		t.Fatal(err)
	}
	stream := fdtest.Messages(t, base, "qb-waiter")
	if est := nextMsg(t, stream, "estimation", id); est["rank"] != float64(0) {
		t.Errorf("the waiter's estimation: %v, want rank 0", est)
	}
	close(gate)
	nextMsg(t, occStream, "process_completed", occ)
	nextMsg(t, stream, "process_starts", id)
	if done := nextMsg(t, stream, "process_completed", id); done["success"] != true || !strings.Contains(fmt.Sprint(done["output"]), "released") {
		t.Errorf("the waiter's call ended %v", done)
	}
	nextMsg(t, stream, "close_stream", "")
	fdtest.WaitFor(t, "the slots freed", func() bool { return fd.Stats().InFlight == 0 })
	if st := fd.Stats(); st.Queued != before+1 {
		t.Errorf("front door stats %+v (%d queued before the waiter's join): want the waiter's join queued", st, before)
	}
}

// TestFrontDoorMixedErrorText: gr.Error's text has the presented
// generation's form whichever replica raised it: under a Gradio 4.44
// reference (quoted, Python's repr) from a bridged 4.16 replica and a
// relayed Gradio 5 one too; under a Gradio 5 reference, unquoted from a
// 4.44 replica.
func TestFrontDoorMixedErrorText(t *testing.T) {
	const msg = "deliberate failure for input 'boom'"
	for _, c := range []struct {
		name  string
		modes []gradiotest.Mode
		want  string
	}{
		{"gradio4.44 reference", []gradiotest.Mode{gradiotest.Gradio4SSEv3, gradiotest.Gradio4SSEv1, gradiotest.Gradio5}, `"` + msg + `"`},
		{"gradio5 reference", []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv3, gradiotest.Gradio4SSEv1}, msg},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, _, sims := newDoorModes(t, c.modes, nil, nil)
			fail := fdtest.FnIndex(t, srv.URL, "fail")
			ranOnAll := func() bool {
				for _, s := range sims {
					if s.Executions("fail") == 0 {
						return false
					}
				}
				return true
			}
			for i := 0; i < 12 && !ranOnAll(); i++ {
				h := fmt.Sprintf("err%d", i)
				id, err := fdtest.Join(srv.URL, h, fail, "boom")
				if err != nil {
					t.Fatal(err)
				}
				done, err := fdtest.Stream(srv.URL, h)
				if err != nil {
					t.Fatal(err)
				}
				out, _ := done[id]["output"].(map[string]any)
				if done[id]["success"] != false || out["error"] != c.want {
					t.Errorf("call %d: %v, want the error %s", i, done[id], c.want)
				}
			}
			if !ranOnAll() {
				t.Errorf("the failing call did not run on every replica in 12 calls")
			}
		})
	}
}

// TestFrontDoorMixedOneStream: one caller session with calls in flight on
// a relayed (Gradio 5) and a bridged (4.16) replica at once gets all of
// them on its one queue/data stream, then close_stream.
func TestFrontDoorMixedOneStream(t *testing.T) {
	gate := make(chan struct{})
	modes := []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv1}
	srv, fd, sims := newDoorModes(t, modes, []*gradiotest.App{fdtest.SpreadApp(gate), fdtest.SpreadApp(gate)}, nil)
	hold := fdtest.FnIndex(t, srv.URL, "hold")
	var ids []string
	var stream <-chan map[string]any
	both := func() bool { return sims[0].Snapshot().Running > 0 && sims[1].Snapshot().Running > 0 }
	for i := 0; i < 6 && !both(); i++ {
		id, err := fdtest.Join(srv.URL, "onestream", hold, fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if stream == nil {
			// Opened after the first join's answer, as the official
			// clients do: a bridged call is joined at its replica once
			// its caller reads.
			stream = fdtest.Messages(t, srv.URL, "onestream")
		}
		fdtest.WaitFor(t, "the call to run", func() bool { return sims[0].Snapshot().Running+sims[1].Snapshot().Running == len(ids) })
	}
	if !both() {
		t.Fatalf("the session's %d stateless calls all run on one replica, want both generations", len(ids))
	}
	close(gate)
	// The calls end in any order; close_stream comes after the last.
	done := map[string]map[string]any{}
	closed := false
	for m := range stream {
		if id, ok := m["event_id"].(string); ok && m["msg"] == "process_completed" {
			done[id] = m
		}
		if m["msg"] == "close_stream" {
			closed = len(done) == len(ids)
			break
		}
	}
	if !closed {
		t.Errorf("the stream ended with %d of the %d completions (or without close_stream)", len(done), len(ids))
	}
	for i, id := range ids {
		if m := done[id]; m["success"] != true || !strings.Contains(fmt.Sprint(m["output"]), fmt.Sprintf("held %d", i)) {
			t.Errorf("call %d ended %v", i, m)
		}
	}
	fdtest.WaitFor(t, "the slots freed", func() bool { return fd.Stats().InFlight == 0 })
}

// TestFrontDoorBridgeStreamGoneSessionGoesOn: a caller whose stream goes
// away has its bridged call stopped, and its session's next call runs
// (the stream's end does not close the session's bridge).
func TestFrontDoorBridgeStreamGoneSessionGoesOn(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	srv, fd, sims := newDoorModes(t, []gradiotest.Mode{gradiotest.Gradio4SSEv1}, []*gradiotest.App{fdtest.SpreadApp(gate)}, nil)
	hold, upper := fdtest.FnIndex(t, srv.URL, "hold"), fdtest.FnIndex(t, srv.URL, "upper")
	id, err := fdtest.Join(srv.URL, "goeson", hold, "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/gradio_api/queue/data?session_hash=goeson", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	if m := readUntil(t, sc, "process_starts"); m["event_id"] != id {
		t.Errorf("process_starts of %v, want %s", m["event_id"], id)
	}
	cancel() // the caller goes away
	resp.Body.Close()
	fdtest.WaitFor(t, "the call stopped at the replica, its slot freed", func() bool {
		return sims[0].Snapshot().Running == 0 && fd.Stats().InFlight == 0
	})
	if got := fdtest.Call(t, srv.URL, "goeson", upper, "next"); got != "NEXT" {
		t.Errorf("the session's next call: %q", got)
	}
}
