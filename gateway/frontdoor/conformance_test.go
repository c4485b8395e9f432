package frontdoor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
)

// TestFrontDoorJSConformance runs the official @gradio/client 2.7.0
// conformance suite against one simulated replica and then against the
// gateway in front of three, and requires every check that passes against
// the replica to pass through the gateway.
func TestFrontDoorJSConformance(t *testing.T) {
	fdtest.NodeOrSkip(t)
	srv, fd, sims, _ := newDoor(t, 3, nil)
	// The same flags both times. Not --sim: the gateway does not serve the
	// simulator's /_sim/ control routes (the server-side effects of cancel
	// are checked by gradiotest's suite against the simulator; the gateway
	// forwards cancel to the same replica with the backend session hash).
	sticky := []string{"--sticky-header", frontdoor.UserHeader + ": conformance@example.com"}
	base := fdtest.RunNode(t, "conformance.mjs", append([]string{sims[0].URL}, sticky...)...)
	front := fdtest.RunNode(t, "conformance.mjs", append([]string{srv.URL}, sticky...)...)

	got := map[string]fdtest.JSCheck{}
	for _, c := range front {
		got[c.Name] = c
	}
	passedBase := 0
	for _, c := range base {
		if !c.OK || c.Skipped {
			continue
		}
		passedBase++
		t.Run(c.Name, func(t *testing.T) {
			fc, ok := got[c.Name]
			switch {
			case !ok:
				t.Errorf("passes against one replica, did not run through the gateway")
			case fc.Skipped:
				t.Errorf("passes against one replica, skipped through the gateway: %s", fc.Detail)
			case !fc.OK:
				t.Errorf("passes against one replica, fails through the gateway: %s", fc.Detail)
			default:
				t.Logf("%s", fc.Detail)
			}
		})
	}
	for _, must := range []string{"connect", "view_api", "predict/upper", "predict/reverse_file", "state/same_client",
		"state/session_hash_option", "error/gr_error", "submit/count_generator", "cancel/running_job", "cancel/queued_job"} {
		if c, ok := got[must]; !ok || !c.OK || c.Skipped {
			t.Errorf("check %s did not pass through the gateway: %+v", must, c)
		}
	}
	if passedBase < 20 {
		t.Errorf("only %d checks passed against one replica: the baseline run is broken", passedBase)
	}
	// The sessions were spread: more than one replica ran calls.
	used := 0
	for _, s := range sims[:] {
		if n := s.Executions("upper"); n > 0 {
			used++
		}
	}
	st := fd.Stats()
	t.Logf("front door after the suite: %+v; replicas that ran upper (replica 0 also served the baseline run): %d", st, used)
	if st.Joins == 0 || st.Created == 0 {
		t.Errorf("front door stats %+v: no joins counted", st)
	}
	pinned := 0
	for _, n := range st.Pinned {
		if n > 0 {
			pinned++
		}
	}
	if pinned < 2 {
		t.Errorf("sessions pinned to %d replica(s), want them spread over several: %+v", pinned, st.Pinned)
	}
}

// TestFrontDoorConcurrentSessionsAndReplicaKill runs several concurrent
// official JS clients through the gateway: each keeps its own gr.State
// while the sessions spread over three replicas; then one replica is
// killed, and every later call still runs exactly once (sessions of the
// killed replica move and start with empty state; new sessions avoid it).
func TestFrontDoorConcurrentSessionsAndReplicaKill(t *testing.T) {
	node, dir := fdtest.NodeOrSkip(t)
	srv, fd, sims, _ := newDoor(t, 3, nil)
	const n = 6
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "frontdoor_sessions.mjs", srv.URL, strconv.Itoa(n))
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stderr logbuf.Buffer // read while node writes it
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 1<<24)
	next := func(v any) {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("script ended early: %v\n%s", lines.Err(), stderr.String())
		}
		if err := json.Unmarshal(lines.Bytes(), v); err != nil {
			t.Fatalf("bad line %s: %v", lines.Bytes(), err)
		}
	}
	type res struct {
		OK    bool   `json:"ok"`
		Data  string `json:"data"`
		Error string `json:"error"`
	}
	var p1 struct {
		Phase   int `json:"phase"`
		Clients []struct {
			Client  int    `json:"client"`
			Results []res  `json:"results"`
			Harness string `json:"harness_error"`
		} `json:"clients"`
	}
	next(&p1)
	if p1.Phase != 1 || len(p1.Clients) != n {
		t.Fatalf("phase 1: %+v\n%s", p1, stderr.String())
	}
	for _, c := range p1.Clients {
		for k, r := range c.Results {
			want := fmt.Sprintf("%d items: %s", k+1, strings.Join(items(c.Client, "o", k+1), ", "))
			if !r.OK || r.Data != want {
				t.Errorf("client %d call %d: %+v, want %q", c.Client, k+1, r, want)
			}
		}
	}
	st := fd.Stats()
	spread, victim, most := 0, "", 0
	for name, k := range st.Pinned {
		if k > 0 {
			spread++
		}
		if k > most {
			victim, most = name, k
		}
	}
	if spread < 2 {
		t.Errorf("%d sessions pinned to %d replica(s): %+v; want them spread", n, spread, st.Pinned)
	}
	for _, s := range sims {
		if strings.HasSuffix(s.URL, "//"+victim) {
			s.Close()
		}
	}
	t.Logf("killed replica %s with %d of %d sessions", victim, most, n)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	var p2 struct {
		Phase int `json:"phase"`
		Old   []struct {
			Client int `json:"client"`
			Result res `json:"result"`
		} `json:"old"`
		New []struct {
			Client  int    `json:"client"`
			Connect string `json:"connect_error"`
			Results []res  `json:"results"`
		} `json:"new"`
	}
	next(&p2)
	moved := 0
	for _, c := range p2.Old {
		kept := fmt.Sprintf("4 items: %s", strings.Join(items(c.Client, "o", 4), ", "))
		fresh := fmt.Sprintf("1 items: o%dd", c.Client)
		switch {
		case c.Result.OK && c.Result.Data == kept:
		case c.Result.OK && c.Result.Data == fresh:
			moved++
		default:
			t.Errorf("old client %d after the kill: %+v; want %q (state kept) or %q (moved)", c.Client, c.Result, kept, fresh)
		}
	}
	if moved != most {
		t.Errorf("%d old sessions started over, want the %d of the killed replica", moved, most)
	}
	for _, c := range p2.New {
		if c.Connect != "" {
			t.Errorf("new client %d: connect: %s", c.Client, c.Connect)
			continue
		}
		for k, r := range c.Results {
			want := fmt.Sprintf("%d items: %s", k+1, strings.Join(items(c.Client, "n", k+1), ", "))
			if !r.OK || r.Data != want {
				t.Errorf("new client %d call %d: %+v, want %q", c.Client, k+1, r, want)
			}
		}
	}
	// Every call ran exactly once: refused joins were never run, accepted
	// ones never twice.
	total := 0
	for _, s := range sims {
		total += s.Executions("counter")
	}
	if want := 3*n + n + 2*n; total != want {
		t.Errorf("counter ran %d times on the replicas, want %d (one per call)", total, want)
	}
	st = fd.Stats()
	if st.StateLost != uint64(most) || st.Lost != 0 {
		t.Errorf("front door stats %+v: want StateLost %d, Lost 0", st, most)
	}
	t.Logf("after the kill: %+v", st)
}

// items are the counter items prefix+client+a.. of the first k calls.
func items(client int, prefix string, k int) []string {
	var out []string
	for i := range k {
		out = append(out, fmt.Sprintf("%s%d%c", prefix, client, 'a'+i))
	}
	return out
}

// TestFrontDoorLostCallIsReportedNotRerun: a call the replica accepted and
// then lost (its stream cut mid-event) reaches the caller as Gradio's error
// message, its slot is freed, and it never runs again.
func TestFrontDoorLostCallIsReportedNotRerun(t *testing.T) {
	srv, fd, sims, _ := newDoor(t, 1, nil)
	sims[0].CutNextStreams(1)
	post := func(path, body string) string {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	join := post("/gradio_api/queue/join", `{"data":[3],"fn_index":1,"session_hash":"lost1","event_data":null,"trigger_id":null}`)
	var j struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal([]byte(join), &j); err != nil || j.EventID == "" {
		t.Fatalf("join: %s", join)
	}
	resp, err := http.Get(srv.URL + "/gradio_api/queue/data?session_hash=lost1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var last map[string]any
	for _, line := range strings.Split(string(b), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"process_completed"`) {
			_ = json.Unmarshal([]byte(d), &last)
		}
	}
	out, _ := last["output"].(map[string]any)
	if last == nil || last["event_id"] != j.EventID || last["success"] != false || !strings.Contains(fmt.Sprint(out["error"]), "not run again") {
		t.Fatalf("stream after the cut:\n%s", b)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(b)), `{"msg":"close_stream","event_id":null}`) {
		t.Errorf("the stream does not end with close_stream:\n%s", b)
	}
	if st := fd.Stats(); st.InFlight != 0 || st.Lost != 1 {
		t.Errorf("stats %+v: want the slot freed and one call lost", st)
	}
	if n := sims[0].Executions("count"); n != 1 {
		t.Errorf("count ran %d times, want 1 (never re-run)", n)
	}
}
