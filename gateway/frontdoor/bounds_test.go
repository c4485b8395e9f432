package frontdoor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// openHeartbeat opens session's heartbeat stream and reads its first
// ALIVE; the stream stays open until the test ends.
func openHeartbeat(t *testing.T, base, session string) *http.Response {
	t.Helper()
	resp, err := http.Get(base + "/gradio_api/heartbeat/" + session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("heartbeat: %d %s", resp.StatusCode, b)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestFrontDoorUnreadJoinsFreeTheirSlots: joins whose caller never opens
// queue/data (while it keeps a heartbeat stream, which keeps its session)
// take every slot of the replica; past frontdoor.read_grace they are
// cancelled at the replica and their slots freed, so that /v1 is served
// again. A call whose stream is open is not touched by the grace.
// (issue 20 "Why" 3)
func TestFrontDoorUnreadJoinsFreeTheirSlots(t *testing.T) {
	const maxConn = 3
	gate := make(chan struct{})
	srv, fd, sims, p, _ := newDoorApps(t, []*gradiotest.App{fdtest.HoldApp(gate)}, func(c *config) {
		c.Pool.MaxConnections = maxConn
		c.FrontDoor.ReadGrace = 100 * time.Millisecond
	})
	name := fdtest.ReplicaName(sims[0])
	fn := fdtest.FnIndex(t, srv.URL, "hold")
	openHeartbeat(t, srv.URL, "idle-reader")
	for i := range maxConn {
		if _, err := fdtest.Join(srv.URL, "idle-reader", fn, "x"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	inUse := func() int { return p.Stats(context.Background()).Pools[name].InUseConnections }
	fdtest.WaitFor(t, "the unread calls cancelled and their slots free", func() bool {
		return fd.Stats().NotRead == maxConn && inUse() == 0 &&
			sims[0].Requests("cancel") == maxConn && sims[0].Snapshot().Running == 0
	})

	// A read call outlives the grace: its stream is open.
	id, err := fdtest.Join(srv.URL, "reader", fn, "kept")
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan map[string]map[string]any, 1)
	go func() {
		done, _ := fdtest.Stream(srv.URL, "reader")
		res <- done
	}()
	fdtest.WaitFor(t, "the read call running", func() bool { return sims[0].Snapshot().Running == 1 })
	time.Sleep(4 * 100 * time.Millisecond) // past the grace
	close(gate)
	done := <-res
	if m := done[id]; m == nil || m["success"] != true {
		t.Fatalf("the read call past the grace: %v, want success", m)
	}
	if n := fd.Stats().NotRead; n != maxConn {
		t.Errorf("%d calls cancelled as unread, want %d (the read one is not)", n, maxConn)
	}
}

// TestFrontDoorUploadDefaultsToMaxBodyBytes: over an app without
// max_file_size, one uploaded file may not exceed max_body_bytes (it was
// unbounded: issue 20 "Why" 4); a file within it is kept.
func TestFrontDoorUploadDefaultsToMaxBodyBytes(t *testing.T) {
	srv, fd, _, _, _ := newDoorApps(t, []*gradiotest.App{nil}, func(c *config) { c.FrontDoor.MaxBodyBytes = 1000 })
	if resp, err := http.Get(srv.URL + "/config"); err == nil { // the reference replica is known
		resp.Body.Close()
	}
	upload := func(n int) int {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		w, _ := mw.CreateFormFile("files", "f.bin")
		_, _ = w.Write(bytes.Repeat([]byte{'x'}, n))
		_ = mw.Close()
		resp, err := http.Post(srv.URL+"/gradio_api/upload", mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := upload(1001); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("upload of 1001 bytes with max_body_bytes 1000: %d, want 413", st)
	}
	if st := upload(1000); st != http.StatusOK {
		t.Fatalf("upload of 1000 bytes: %d, want 200", st)
	}
	if st := fd.Stats(); st.Uploads != 1 || st.UploadBytes != 1000 {
		t.Fatalf("kept %d uploads, %d bytes; want 1, 1000", st.Uploads, st.UploadBytes)
	}
}

// configRoot reads the front door's /config with the Host header host
// (and extra headers) and returns its root.
func configRoot(t *testing.T, base, host string, hdr ...string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/config", nil)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Root string `json:"root"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil {
		t.Fatalf("GET /config (Host %s): %d %.200s", host, resp.StatusCode, b)
	}
	return v.Root
}

// TestFrontDoorHostCheck: the root /config announces is not taken from a
// Host header naming another host (issue 20 "Why" 11): it is the listen
// address, or frontdoor.public_url when set; a loopback Host is taken as
// it is; X-Forwarded-Host counts only with trust_forwarded_headers.
func TestFrontDoorHostCheck(t *testing.T) {
	srv, _, _, _, _ := newDoorApps(t, []*gradiotest.App{nil}, func(c *config) { c.FrontDoor.ListenAddr = "0.0.0.0:8080" })
	if got := configRoot(t, srv.URL, "evil.example"); strings.Contains(got, "evil") || got != "http://localhost:8080" {
		t.Errorf("Host evil.example: root %q, want the listen address http://localhost:8080", got)
	}
	if got := configRoot(t, srv.URL, "evil.example", "X-Forwarded-Host", "evil.example"); strings.Contains(got, "evil") {
		t.Errorf("X-Forwarded-Host without trust_forwarded_headers: root %q", got)
	}
	if got, want := configRoot(t, srv.URL, strings.TrimPrefix(srv.URL, "http://")), srv.URL; got != want {
		t.Errorf("loopback Host: root %q, want %q", got, want)
	}

	pub, _, _, _, _ := newDoorApps(t, []*gradiotest.App{nil}, func(c *config) { c.FrontDoor.PublicURL = "https://gradio.example.com/app/" })
	if got := configRoot(t, pub.URL, "evil.example"); got != "https://gradio.example.com/app" {
		t.Errorf("with public_url, Host evil.example: root %q, want https://gradio.example.com/app", got)
	}

	fwd, _, _, _, _ := newDoorApps(t, []*gradiotest.App{nil}, func(c *config) { c.FrontDoor.TrustForwarded = true })
	if got := configRoot(t, fwd.URL, "internal:8080", "X-Forwarded-Host", "gradio.example.com", "X-Forwarded-Proto", "https"); got != "https://gradio.example.com" {
		t.Errorf("trusted forwarded headers: root %q, want https://gradio.example.com", got)
	}
}
