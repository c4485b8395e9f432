package gradio_test

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

type wsStep struct {
	fromServer bool
	text       string // "" with close
	close      bool
}

// parseWSTranscript reads the Gradio 3.50.2 capture: the /config and
// /info bodies and each WebSocket session's frames.
func parseWSTranscript(t testing.TB) (config, info string, sessions [][]wsStep) {
	b, err := os.ReadFile("testdata/transcripts/gradio-3.50.2_jsclient-1.19.1_websocket.txt")
	if err != nil {
		t.Fatal(err)
	}
	frame := regexp.MustCompile(`^--- \[#\d+\] .* WS (server->client|client->server) (text|close): ?(.*)$`)
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		switch {
		case strings.Contains(l, "response body (") && strings.HasPrefix(lines[i+1], `{"version"`):
			config = lines[i+1]
		case strings.Contains(l, "response body (") && strings.HasPrefix(lines[i+1], `{"named_endpoints"`):
			info = lines[i+1]
		case strings.Contains(l, "WS UPGRADE GET"):
			sessions = append(sessions, nil)
		case frame.MatchString(l):
			m := frame.FindStringSubmatch(l)
			st := wsStep{fromServer: m[1] == "server->client", close: m[2] == "close"}
			if !st.close {
				st.text = m[3]
			}
			sessions[len(sessions)-1] = append(sessions[len(sessions)-1], st)
		}
	}
	return config, info, sessions
}

// wsReplay serves the captured WebSocket sessions in order.
type wsReplay struct {
	mu       sync.Mutex
	config   string
	info     string
	sessions [][]wsStep
	errs     []error
	runs     int // POST /run/predict calls
}

func (r *wsReplay) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *wsReplay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.URL.Path {
	case "/config":
		io.WriteString(w, r.config)
		return
	case "/info":
		io.WriteString(w, r.info)
		return
	case "/run/predict":
		r.mu.Lock()
		r.runs++
		r.mu.Unlock()
		var body struct {
			Data []string `json:"data"`
		}
		json.NewDecoder(req.Body).Decode(&body)
		fmt.Fprintf(w, `{"data":[%q],"is_generating":false}`, strings.ToUpper(body.Data[0]))
		return
	case "/queue/join":
	default:
		http.NotFound(w, req)
		return
	}
	r.mu.Lock()
	if len(r.sessions) == 0 {
		r.mu.Unlock()
		http.Error(w, "no more sessions", 500)
		return
	}
	steps := r.sessions[0]
	r.sessions = r.sessions[1:]
	r.mu.Unlock()
	if req.Header.Get("Upgrade") != "websocket" {
		r.fail(errors.New("not an upgrade"))
		return
	}
	sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		r.fail(err)
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
	brw.Flush()
	for _, st := range steps {
		switch {
		case st.fromServer && st.close:
			brw.Write([]byte{0x88, 2, 0x03, 0xe8})
			brw.Flush()
		case st.fromServer:
			writeServerFrame(brw.Writer, st.text)
		case st.close:
			// The client's close answer; read it if it comes.
			readClientFrame(brw.Reader)
		default:
			got, err := readClientFrame(brw.Reader)
			if err != nil {
				r.fail(fmt.Errorf("reading client frame: %v", err))
				return
			}
			var a, b map[string]any
			json.Unmarshal([]byte(st.text), &a)
			json.Unmarshal(got, &b)
			for _, k := range []string{"data", "fn_index"} {
				if !reflect.DeepEqual(a[k], b[k]) {
					r.fail(fmt.Errorf("client sent %s, recorded %s", got, st.text))
				}
			}
		}
	}
}

func writeServerFrame(w *bufio.Writer, text string) {
	n := len(text)
	w.WriteByte(0x81)
	switch {
	case n < 126:
		w.WriteByte(byte(n))
	case n <= 0xffff:
		w.WriteByte(126)
		binary.Write(w, binary.BigEndian, uint16(n))
	default:
		w.WriteByte(127)
		binary.Write(w, binary.BigEndian, uint64(n))
	}
	w.WriteString(text)
	w.Flush()
}

func readClientFrame(r *bufio.Reader) ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	if h[1]&0x80 == 0 {
		return nil, errors.New("client frame not masked")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		io.ReadFull(r, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		io.ReadFull(r, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	var mask [4]byte
	io.ReadFull(r, mask[:])
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, err
	}
	for i := range p {
		p[i] ^= mask[i%4]
	}
	return p, nil
}

func TestGradio3WebSocketReplay(t *testing.T) {
	config, info, sessions := parseWSTranscript(t)
	if config == "" || info == "" || len(sessions) != 2 {
		t.Fatalf("transcript: config %d info %d sessions %d", len(config), len(info), len(sessions))
	}
	rp := &wsReplay{config: config, info: info, sessions: sessions}
	srv := httptest.NewServer(rp)
	defer srv.Close()
	c := connect(t, srv.URL)
	defer c.Close()
	if c.Config().Protocol != gradio.ProtocolWS || c.Config().Version != "3.50.2" {
		t.Fatalf("config %q %q", c.Config().Protocol, c.Config().Version)
	}
	ctx := testCtx(t)
	out, err := c.Predict(ctx, "/upper", "hello gradio")
	if err != nil || str(t, out[0]) != "HELLO GRADIO" {
		t.Fatalf("upper: %s %v", out, err)
	}
	j, err := c.Submit(ctx, "/count", 5)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, j)
	if got := strings.Join(outputs(t, evs), "|"); got != "0|0 1|0 1 2|0 1 2 3|0 1 2 3 4" {
		t.Fatalf("partial %q", got)
	}
	if evs[0].Kind != gradio.EventQueued || evs[len(evs)-1].Kind != gradio.EventCompleted {
		t.Fatalf("events %v ... %v", evs[0].Kind, evs[len(evs)-1].Kind)
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for _, err := range rp.errs {
		t.Error(err)
	}
}

func TestGradio3RunPredict(t *testing.T) {
	config, info, _ := parseWSTranscript(t)
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(config))
	d.UseNumber()
	d.Decode(&m)
	m["enable_queue"] = false
	b, _ := json.Marshal(m)
	rp := &wsReplay{config: string(b), info: info}
	srv := httptest.NewServer(rp)
	defer srv.Close()
	c := connect(t, srv.URL)
	defer c.Close()
	out, err := c.Predict(testCtx(t), "upper", "no queue")
	if err != nil || str(t, out[0]) != "NO QUEUE" || rp.runs != 1 {
		t.Fatalf("run/predict: %s %v (runs %d)", out, err, rp.runs)
	}
}
