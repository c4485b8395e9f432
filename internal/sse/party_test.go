package sse_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// TestBudgetPartyShare (issue 33 item 2): one caller (a named party) of a
// healthy replica whose four parallel streams hold nearly the whole budget
// does not make another caller's event on the same replica fail: the
// other caller is under its fair share inside the replica's part, so it
// takes the room back, and the first caller's largest stream ends with
// ErrPartyOverShare, charged to that caller, not to the replica.
func TestBudgetPartyShare(t *testing.T) {
	const total = 8 << 20
	root := sse.NewBudget(total)
	root.SetRateFloor(0, 0)
	replica := root.Part()
	greedy := replica.Party("greedy")
	errs := make(chan error, 4)
	for range 4 {
		r := sse.NewReaderBudget(hostileStream(t, 1<<20+768<<10, 0), 0, greedy)
		go func() {
			_, err := r.Next()
			r.Release()
			errs <- err
		}()
	}
	waitHeld(t, root, 6<<20+512<<10)

	// 3 MiB held while it is read (its line, then its data): it fits only
	// if the greedy caller gives room back.
	event := "data: " + strings.Repeat("y", 3<<19) + "\n\n"
	r := sse.NewReaderBudget(strings.NewReader(event), 0, replica.Party("other"))
	ev, err := r.Next()
	if err != nil || len(ev.Data) != 3<<19 {
		t.Fatalf("the other caller's event on the same replica: %d bytes, %v", len(ev.Data), err)
	}
	r.Release()
	if err := <-errs; !errors.Is(err, sse.ErrPartyOverShare) || !errors.Is(err, sse.ErrEventTooLarge) {
		t.Fatalf("the greedy caller's stream cut for room: %v, want ErrPartyOverShare", err)
	}
	if rep, party := root.Charged(); rep != 0 || party == 0 {
		t.Errorf("charged: %d to the replica, %d to a caller; want 0 and > 0", rep, party)
	}

	// The greedy caller, over its share, cannot take room back from the
	// other: its own new stream fails, charged to it.
	keep := sse.NewReaderBudget(hostileStream(t, 2<<20, 0), 0, replica.Party("other"))
	go func() { _, _ = keep.Next() }()
	waitHeld(t, replica.Party("other"), 1<<20+512<<10)
	more := sse.NewReaderBudget(strings.NewReader("data: "+strings.Repeat("z", 4<<20)+"\n\n"), 0, greedy)
	if _, err := more.Next(); !errors.Is(err, sse.ErrPartyOverShare) {
		t.Errorf("a caller over its share taking more: %v, want ErrPartyOverShare", err)
	}
	more.Release()
	if h := replica.Party("other").Held(); h < 1<<20+512<<10 {
		t.Errorf("the other caller lost its bytes to one over its share: holds %d", h)
	}
}

// TestBudgetHostileReplicaBlame (issue 33 item 2): a hostile replica whose
// streams belong to three callers, one stream each, is charged with the
// cuts made for a healthy replica's caller (ErrBudgetReclaimed), not its
// callers: each runs no more streams than the others.
func TestBudgetHostileReplicaBlame(t *testing.T) {
	const total = 8 << 20
	root := sse.NewBudget(total)
	root.SetRateFloor(0, 0)
	hostile, healthy := root.Part(), root.Part()
	errs := make(chan error, 3)
	for _, caller := range []string{"a", "b", "c"} {
		r := sse.NewReaderBudget(hostileStream(t, 2<<20+256<<10, 0), 0, hostile.Party(caller))
		go func() {
			_, err := r.Next()
			r.Release()
			errs <- err
		}()
	}
	waitHeld(t, root, 6<<20+512<<10)
	event := "data: " + strings.Repeat("y", 3<<19) + "\n\n"
	r := sse.NewReaderBudget(strings.NewReader(event), 0, healthy.Party("a"))
	if ev, err := r.Next(); err != nil || len(ev.Data) != 3<<19 {
		t.Fatalf("a caller's event on the healthy replica: %d bytes, %v", len(ev.Data), err)
	}
	r.Release()
	if err := <-errs; !errors.Is(err, sse.ErrBudgetReclaimed) {
		t.Fatalf("the hostile stream cut for room: %v, want ErrBudgetReclaimed", err)
	}
	if rep, party := root.Charged(); rep == 0 || party != 0 {
		t.Errorf("charged: %d to the replica, %d to a caller; want > 0 and 0", rep, party)
	}
}

// TestBudgetPartyBounded: named parties hold no state once their Readers
// are released, so made-up names do not accumulate.
func TestBudgetPartyBounded(t *testing.T) {
	root := sse.NewBudget(1 << 20)
	part := root.Part()
	p := part.Party("x")
	r := sse.NewReaderBudget(strings.NewReader("data: a\n\n"), 0, p)
	if part.Party("x") != p {
		t.Errorf("Party(x) while a Reader of it is registered is another part")
	}
	r.Release()
	if part.Party("x") == p {
		t.Errorf("Party(x) is still kept after its last Reader")
	}
}

// TestBudgetPartyAloneBlame: a caller alone on its replica whose parallel
// streams fill the budget is charged with its own refused stream
// (ErrPartyOverShare), not the replica.
func TestBudgetPartyAloneBlame(t *testing.T) {
	root := sse.NewBudget(4 << 20)
	root.SetRateFloor(0, 0)
	greedy := root.Part().Party("greedy")
	for range 2 {
		r := sse.NewReaderBudget(hostileStream(t, 1<<20+768<<10, 0), 0, greedy)
		go func() { _, _ = r.Next(); r.Release() }()
	}
	waitHeld(t, root, 3<<20+256<<10)
	more := sse.NewReaderBudget(strings.NewReader("data: "+strings.Repeat("z", 2<<20)+"\n\n"), 0, greedy)
	if _, err := more.Next(); !errors.Is(err, sse.ErrPartyOverShare) {
		t.Errorf("a third stream of a caller alone over the budget: %v, want ErrPartyOverShare", err)
	}
	more.Release()
	if rep, party := root.Charged(); rep != 0 || party == 0 {
		t.Errorf("charged: %d to the replica, %d to the caller; want 0 and > 0", rep, party)
	}
}
