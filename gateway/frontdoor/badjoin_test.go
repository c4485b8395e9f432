package frontdoor_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// badJoin posts a join of an fn_index no replica has (real Gradio answers
// it 500, with a Python traceback from 5.0 to 6.8: the simulators' default
// mode) and returns the front door's answer.
func badJoin(t *testing.T, base, session string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"data":["x"],"fn_index":999,"session_hash":%q,"event_data":null,"trigger_id":null}`, session)
	resp, err := http.Post(base+"/gradio_api/queue/join", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFrontDoorShowReplicaErrors: with frontdoor.show_replica_errors the
// caller gets the replica's own answer (here Gradio 5's traceback); still
// not retried nor counted against the replica.
func TestFrontDoorShowReplicaErrors(t *testing.T) {
	srv, fd, _, _ := newDoor(t, 2, func(c *config) { c.FrontDoor.ShowReplicaErrors = true })
	st, body := badJoin(t, srv.URL, "shown")
	if st != http.StatusInternalServerError || !strings.Contains(body, "KeyError: 999") {
		t.Fatalf("bad join: %d %s, want the replica's 500 traceback", st, body)
	}
	if s := fd.Stats(); s.Refused != 0 || s.CallerFaults != 1 {
		t.Errorf("%d refused, %d refused for their input; want 0, 1", s.Refused, s.CallerFaults)
	}
}
