package frontdoor_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorShowReplicaErrors: with frontdoor.show_replica_errors the
// caller gets the replica's own answer (here Gradio 5's traceback); still
// not retried nor counted against the replica.
func TestFrontDoorShowReplicaErrors(t *testing.T) {
	srv, fd, _, _ := newDoor(t, 2, func(c *config) { c.FrontDoor.ShowReplicaErrors = true })
	st, body := fdtest.BadJoin(t, srv.URL, "shown")
	if st != http.StatusInternalServerError || !strings.Contains(body, "KeyError: 999") {
		t.Fatalf("bad join: %d %s, want the replica's 500 traceback", st, body)
	}
	if s := fd.Stats(); s.Refused != 0 || s.CallerFaults != 1 {
		t.Errorf("%d refused, %d refused for their input; want 0, 1", s.Refused, s.CallerFaults)
	}
}
