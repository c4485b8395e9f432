package frontdoor_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorFirstJoinsBindOneReplica: a new session's first joins
// arrive at once over two replicas; no lock orders them while they wait
// for their slots, yet the session binds to one replica only (the first
// to bind wins, the others follow it), so every gr.State call of it runs
// on that replica: the session's list ends with all of them.
func TestFrontDoorFirstJoinsBindOneReplica(t *testing.T) {
	var urls []string
	for range 2 {
		sim := gradiotest.NewServer(nil)
		t.Cleanup(sim.Close)
		urls = append(urls, sim.URL)
	}
	srv, _, _ := newDoorOver(t, urls, nil)
	counter := fdtest.FnIndex(t, srv.URL, "counter")
	const joins = 8
	for round := range 5 {
		session := "bindrace" + strconv.Itoa(round)
		var wg sync.WaitGroup
		errs := make(chan error, joins)
		for i := range joins {
			wg.Go(func() {
				if _, err := fdtest.Join(srv.URL, session, counter, "i"+strconv.Itoa(i), nil); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if _, err := fdtest.Stream(srv.URL, session); err != nil {
			t.Fatal(err)
		}
		got := fdtest.Call(t, srv.URL, session, counter, "last", nil)
		if want := strconv.Itoa(joins+1) + " items:"; len(got) < len(want) || got[:len(want)] != want {
			t.Fatalf("round %d: the session's list after %d joins at once and one more: %q, want %q...: its calls split over the replicas", round, joins, got, want)
		}
	}
}
