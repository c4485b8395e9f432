package frontdoor_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorStarvedReplicaNotSuspect: a replica whose threads are all
// taken by front-door calls answers the pool's ping late (Gradio's
// /app_id waits for a thread), but its relayed streams bring heartbeats:
// those count as its signs of life, so it is never marked suspect while
// the calls run, and they all complete.
func TestFrontDoorStarvedReplicaNotSuspect(t *testing.T) {
	sim := gradiotest.NewUnstartedServer(nil)
	sim.DefaultConcurrencyLimit = -1
	sim.MaxThreads = 4
	sim.Latency = 2 * time.Second
	sim.HeartbeatInterval = 50 * time.Millisecond
	sim.Start()
	t.Cleanup(sim.Close)
	rec := &fdtest.StarvedRecorder{}
	srv, _, _ := newDoorOver(t, []string{sim.URL}, func(c *config) {
		c.Pool.HangTimeout = 300 * time.Millisecond
		c.Pool.ProbeInterval = 100 * time.Millisecond
		c.Pool.OnEvent = rec.OnEvent
	})
	const calls = 6 // more than the replica's threads
	completeEach(t, srv.URL, "starved", calls)
	suspect := rec.Suspect()
	if rec.Events() == 0 {
		t.Fatal("the pool's events never reached the test's hook (the harness must keep pool.Config.OnEvent)")
	}
	if len(suspect) > 0 {
		t.Errorf("the replica busy with front-door calls was taken for dead: %v", suspect)
	}
	if n := sim.Executions("upper"); n != calls {
		t.Errorf("%d calls ran, want %d", n, calls)
	}
}

// TestFrontDoorStarvedReplicaAnswersLate: a replica short of threads
// answers joins, and opens the streams of new sessions, later than the
// client's header time-out (Gradio's login check waits for a thread; on
// real 5.49.1 short of threads the headers came up to a minute late),
// while the calls it runs stream. Those joins are accepted and their calls
// run: the front door waits for the answers while the replica shows life,
// instead of telling callers "not run again" about calls that then run.
func TestFrontDoorStarvedReplicaAnswersLate(t *testing.T) {
	sim := gradiotest.NewUnstartedServer(nil)
	sim.DefaultConcurrencyLimit = -1
	sim.MaxThreads = 4
	sim.Latency = 3 * time.Second
	sim.HeartbeatInterval = 50 * time.Millisecond
	sim.Start()
	t.Cleanup(sim.Close)
	srv, _, _ := newDoorOver(t, []string{sim.URL}, func(c *config) {
		// Far below the replica's wait for a thread (Latency), far above
		// the gaps between its heartbeats (50 ms) on a loaded machine.
		c.Pool.ClientOptions = append(c.Pool.ClientOptions, gradio.WithHeaderTimeout(time.Second))
		c.FrontDoor.ShowReplicaErrors = true
	})
	const calls = 8 // twice the replica's threads
	// The first four run, their streams open (showing life), before the
	// other four join: joined all at once, the four calls could take
	// every thread before any of their streams got one, and the replica
	// would show no life at all (TestFrontDoorStarvedReplicaAnswersLate
	// then failed now and then; docs/limits.md).
	upper := strconv.Itoa(fdtest.FnIndex(t, srv.URL, "upper"))
	streams := make([]<-chan map[string]any, calls)
	for i := range calls {
		hash := "late" + strconv.Itoa(i)
		fdtest.JoinAt(t, srv.URL, hash, `"data":["x"],"fn_index":`+upper)
		streams[i] = fdtest.Messages(t, srv.URL, hash)
		if i < sim.MaxThreads {
			fdtest.WaitMsg(t, streams[i], "process_starts")
		}
	}
	for i, ch := range streams {
		if done := fdtest.WaitMsg(t, ch, "process_completed"); done["success"] != true {
			t.Errorf("call %d: %v", i, done)
		}
	}
	if n := sim.Executions("upper"); n != calls {
		t.Errorf("%d calls ran, want %d", n, calls)
	}
}

// completeEach makes calls front-door calls of upper at base, one after
// another, each in a session of its own (prefix and its number) with its
// stream opened after its join, and checks that each completes.
func completeEach(t *testing.T, base, prefix string, calls int) {
	t.Helper()
	upper := strconv.Itoa(fdtest.FnIndex(t, base, "upper"))
	streams := make([]<-chan map[string]any, calls)
	for i := range calls {
		hash := prefix + strconv.Itoa(i)
		fdtest.JoinAt(t, base, hash, `"data":["x"],"fn_index":`+upper)
		streams[i] = fdtest.Messages(t, base, hash)
	}
	for i, ch := range streams {
		if done := fdtest.WaitMsg(t, ch, "process_completed"); done["success"] != true {
			t.Errorf("call %d: %v", i, done)
		}
	}
}

// TestFrontDoorUnopenedStreamSaysMayNotHaveRun: a replica that accepted a
// join and then answers nothing (no headers for the call's stream, no
// message on any stream) fails the call a header time-out later with a
// message that does not claim the call ran: on Gradio 5.49.1 a stream
// served after its reader gave up drops the session's queued calls.
func TestFrontDoorUnopenedStreamSaysMayNotHaveRun(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	srv, _, _ := newDoorOver(t, []string{sim.URL}, func(c *config) {
		c.Pool.ClientOptions = append(c.Pool.ClientOptions, gradio.WithHeaderTimeout(300*time.Millisecond))
	})
	upper := strconv.Itoa(fdtest.FnIndex(t, srv.URL, "upper"))
	fdtest.JoinAt(t, srv.URL, "stalled", `"data":["x"],"fn_index":`+upper)
	sim.UpdateKnobs(func(k *gradiotest.Knobs) { k.Stall = true })
	t.Cleanup(func() { sim.UpdateKnobs(func(k *gradiotest.Knobs) { k.Stall = false }) })
	done := fdtest.WaitMsg(t, fdtest.Messages(t, srv.URL, "stalled"), "process_completed")
	out, _ := done["output"].(map[string]any)
	if msg, _ := out["error"].(string); done["success"] != false || !strings.Contains(msg, "could not be opened (the call may not have run)") {
		t.Fatalf("the call whose stream never opened ended with %v", done)
	}
}
