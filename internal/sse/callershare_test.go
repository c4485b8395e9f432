package sse_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// spread opens, for each part, streams of caller key holding held bytes
// each past the allowance (sse.DefaultAllowance); their errors go to errs.
func spread(t *testing.T, key string, held int, errs chan error, parts ...*sse.Budget) {
	t.Helper()
	for _, p := range parts {
		r := sse.NewReaderBudget(hostileStream(t, held+sse.DefaultAllowance, 0), 0, p.Party(key))
		go func() {
			_, err := r.Next()
			r.Release()
			errs <- err
		}()
	}
}

// TestBudgetCallerShareAcrossReplicas (issue 33 item 2): a caller's fair
// share is of the whole budget, over every replica's part. A caller whose
// parallel streams are spread over three replicas (one or two on each,
// the abuse table's row 10) and hold most of the budget is the one cut
// and charged (ErrPartyOverShare) wherever its stream is, even where it
// runs a single stream; the replicas are charged nothing, and another
// caller with more streams than it on one replica is not taken for it.
func TestBudgetCallerShareAcrossReplicas(t *testing.T) {
	const total = 8 << 20
	setup := func() (root, x, y, z *sse.Budget) {
		root = sse.NewBudget(total)
		root.SetRateFloor(0, 0)
		return root, root.Part(), root.Part(), root.Part()
	}
	noReplicaCharged := func(t *testing.T, root *sse.Budget) {
		t.Helper()
		if rep, party := root.Charged(); rep != 0 || party == 0 {
			t.Errorf("charged: %d to a replica, %d to a caller; want 0 and > 0", rep, party)
		}
	}
	drained := func(t *testing.T, errs chan error, want error) {
		t.Helper()
		for {
			select {
			case err := <-errs:
				if !errors.Is(err, want) {
					t.Errorf("a stream ended with %v, want %v", err, want)
				}
			default:
				return
			}
		}
	}

	t.Run("its own stream on a third replica", func(t *testing.T) {
		root, x, y, z := setup()
		errs := make(chan error, 8)
		spread(t, "greedy", 1<<20+128<<10, errs, y, y, y, z, z, z)
		waitHeld(t, root, 6<<20+768<<10)
		r := sse.NewReaderBudget(strings.NewReader("data: "+strings.Repeat("g", 2<<20)+"\n\n"), 0, x.Party("greedy"))
		if _, err := r.Next(); !errors.Is(err, sse.ErrPartyOverShare) {
			t.Errorf("the greedy caller's stream on X: %v, want ErrPartyOverShare", err)
		}
		r.Release()
		noReplicaCharged(t, root)
		drained(t, errs, sse.ErrPartyOverShare)
	})

	t.Run("its single stream on the replica of another caller", func(t *testing.T) {
		root, x, y, z := setup()
		errs := make(chan error, 8)
		spread(t, "greedy", 2<<20, errs, x)
		spread(t, "greedy", 1<<20, errs, y, y, z, z)
		waitHeld(t, root, 6<<20)
		event := "data: " + strings.Repeat("o", 3<<19) + "\n\n"
		r := sse.NewReaderBudget(strings.NewReader(event), 0, x.Party("other"))
		if ev, err := r.Next(); err != nil || len(ev.Data) != 3<<19 {
			t.Fatalf("the other caller's event on X: %d bytes, %v", len(ev.Data), err)
		}
		r.Release()
		if err := <-errs; !errors.Is(err, sse.ErrPartyOverShare) {
			t.Errorf("the greedy stream cut for room: %v, want ErrPartyOverShare", err)
		}
		noReplicaCharged(t, root)
		drained(t, errs, sse.ErrPartyOverShare)
	})

	t.Run("not a bystander with more streams on the replica", func(t *testing.T) {
		root, x, y, z := setup()
		errs, mine := make(chan error, 8), make(chan error, 2)
		spread(t, "other", 768<<10, mine, x, x)
		spread(t, "greedy", 768<<10, errs, x)
		spread(t, "greedy", 1<<20+256<<10, errs, y, y, z, z)
		waitHeld(t, root, 7<<20+256<<10)
		event := "data: " + strings.Repeat("t", 1<<20) + "\n\n"
		r := sse.NewReaderBudget(strings.NewReader(event), 0, x.Party("third"))
		if ev, err := r.Next(); err != nil || len(ev.Data) != 1<<20 {
			t.Fatalf("the third caller's event on X: %d bytes, %v", len(ev.Data), err)
		}
		r.Release()
		select {
		case err := <-mine:
			t.Errorf("the bystander's stream on X ended: %v", err)
		default:
		}
		if h := x.Party("other").Held(); h < 1<<20+512<<10 {
			t.Errorf("the bystander on X holds %d bytes, had 1.5 MiB", h)
		}
		noReplicaCharged(t, root)
		drained(t, errs, sse.ErrPartyOverShare)
	})
}
