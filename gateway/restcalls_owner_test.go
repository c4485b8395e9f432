package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// restPostAs starts a /gradio_api/call call as key and returns its event id.
func restPostAs(t *testing.T, base, key, api, body string) string {
	t.Helper()
	a := do(t, "POST", base+"/gradio_api/call/"+api, body, "Authorization", "Bearer "+key)
	var v struct {
		EventID string `json:"event_id"`
	}
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &v) != nil || v.EventID == "" {
		t.Fatalf("POST /gradio_api/call/%s: %d %s", api, a.status, a.body)
	}
	return v.EventID
}

// restGetAs reads a /gradio_api/call result to its end as key.
func restGetAs(t *testing.T, base, key, api, id string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/gradio_api/call/"+api+"/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRESTCallResultsBelongToTheirKey (issue 33): another key holding the
// event id reads a 404, as for an id never issued, and its cancel is a 404
// that stops nothing; the owner reads its result and cancels its own call,
// told what the cancel did; the event id is in no log line.
func TestRESTCallResultsBelongToTheirKey(t *testing.T) {
	srv, _, _, _, logs := frontGatewayApps(t, []*gradiotest.App{nil}, func(c *gateway.Config) {
		c.Secrets.APIKeys = []string{"key-alice", "key-bob"}
	})
	id := restPostAs(t, srv.URL, "key-alice", "upper", `{"data":["alice secret rest"]}`)
	if got := restGetAs(t, srv.URL, "key-bob", "upper", id); strings.Contains(got, "ALICE") || !strings.Contains(got, "404: Not Found") {
		t.Errorf("another key read the result: %q", got)
	}
	if a := do(t, "POST", srv.URL+"/gradio_api/cancel", `{"event_id":"`+id+`"}`, "Authorization", "Bearer key-bob"); a.status != http.StatusNotFound {
		t.Errorf("another key's cancel: %d %s, want 404", a.status, a.body)
	}
	if got := restGetAs(t, srv.URL, "key-alice", "upper", id); !strings.Contains(got, "ALICE SECRET REST") {
		t.Errorf("the owner could not read its result after the other key's attempts: %q", got)
	}

	// A call still running: the other key's cancel leaves it, the owner's
	// stops it and says so; a second cancel says nothing was left to stop.
	slow := restPostAs(t, srv.URL, "key-alice", "slow", `{"data":[30]}`)
	if a := do(t, "POST", srv.URL+"/gradio_api/cancel", `{"event_id":"`+slow+`"}`, "Authorization", "Bearer key-bob"); a.status != http.StatusNotFound {
		t.Errorf("another key's cancel of a running call: %d %s, want 404", a.status, a.body)
	}
	a := do(t, "POST", srv.URL+"/gradio_api/cancel", `{"event_id":"`+slow+`"}`, "Authorization", "Bearer key-alice")
	if a.status != http.StatusOK || !strings.Contains(a.body, `"cancelled":true`) {
		t.Errorf("the owner's cancel: %d %s", a.status, a.body)
	}
	if got := restGetAs(t, srv.URL, "key-alice", "slow", slow); !strings.Contains(got, "event: error") {
		t.Errorf("a cancelled call's GET: %q, want its error record", got)
	}
	if a := do(t, "POST", srv.URL+"/gradio_api/cancel", `{"event_id":"`+slow+`"}`, "Authorization", "Bearer key-alice"); a.status != http.StatusNotFound {
		t.Errorf("a cancel after the result was read: %d %s, want 404 (freed)", a.status, a.body)
	}
	if a := do(t, "POST", srv.URL+"/gradio_api/cancel", `{"event_id":"never-issued"}`, "Authorization", "Bearer key-alice"); a.status != http.StatusNotFound {
		t.Errorf("a cancel of an unknown id: %d %s, want 404", a.status, a.body)
	}
	for _, e := range []string{id, slow} {
		if strings.Contains(logs.String(), e) {
			t.Errorf("event id %s is in the logs", e)
		}
	}
	if !strings.Contains(logs.String(), `"event_tag"`) {
		t.Errorf("the access lines name no event_tag: %.1000s", logs.String())
	}
}

// TestPendingBytesFairShare (issue 33): one client's unread
// /gradio_api/call results cannot take max_pending_bytes from the others.
// A hog keeps three results unread, the whole bound but one; another
// client's result, which would pass the bound, is kept: the hog, over its
// fair share (half the bound between two clients), loses its largest
// unread result (its GET reads result_too_large), the other client reads
// its output whole.
func TestPendingBytesFairShare(t *testing.T) {
	const size = 600 << 10
	srv, g, _, _, _ := frontGatewayApps(t, []*gradiotest.App{boundsApp()}, func(c *gateway.Config) {
		c.Secrets.APIKeys = []string{"key-hog", "key-other"}
		c.MaxPendingBytes = 2 << 20
		c.MaxPendingResultBytes = 1 << 20
	})
	body := fmt.Sprintf(`{"data":[%d]}`, size)
	var hog []string
	for range 3 {
		hog = append(hog, restPostAs(t, srv.URL, "key-hog", "big", body))
	}
	fdtest.WaitFor(t, "the hog's three results kept", func() bool { _, b := g.PendingCalls(); return b >= 3*size })
	other := restPostAs(t, srv.URL, "key-other", "big", body)
	got := restGetAs(t, srv.URL, "key-other", "big", other)
	if !strings.Contains(got, "event: complete") || len(got) < size {
		t.Fatalf("the other client's result beside the hog's: %.300q, want its %d bytes complete", got, size)
	}
	cut := 0
	for _, id := range hog {
		if r := restGetAs(t, srv.URL, "key-hog", "big", id); strings.Contains(r, "result_too_large") {
			cut++
		} else if !strings.Contains(r, "event: complete") {
			t.Errorf("a hog result neither complete nor cut: %.300q", r)
		}
	}
	if cut != 1 {
		t.Errorf("%d of the hog's results were dropped for room, want 1", cut)
	}
	if n, b := g.PendingCalls(); n != 0 || b != 0 {
		t.Errorf("after every result was read: %d calls, %d bytes kept", n, b)
	}
}
