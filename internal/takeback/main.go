// Command takeback finds out, on a REAL Gradio server, what takes a queued
// event back (issue 33 item 1; the facts are in
// docs/notes-queued-takeback.md). It is a manual experiment, never run by a
// test: the server runs testdata/realgradio/exec_app.py (one slow endpoint,
// one call at a time, that logs every start), and each scenario holds the
// endpoint with an occupant call, joins a victim call with a distinct
// duration, does one thing to take it back (or nothing), then reads the
// server's log for whether the victim ever started.
//
//	ROOT=/tmp/realgradio bash testdata/realgradio/start.sh exec_app.py 4.20.1 7903
//	go run ./internal/takeback -base http://127.0.0.1:7903 -log /tmp/realgradio/logs/exec_app-7903.log
//
// Scenarios for apps with a session stream (sse_v1, sse_v2, sse_v3):
// never (the victim's stream is never opened), drop (a stream of its
// session is opened and dropped), cancel (POST cancel with session_hash,
// fn_index, event_id), reset (POST reset with event_id), dropcancel,
// canceldrop, readcancel (the stream is open while the cancel is sent),
// readdrop (the stream was read for 1 s, then dropped). For sse (v0) and
// ws apps, whose call is its own connection: close (closed after the
// first message), closelater (after 1.5 s), nodata (kept open, send_data
// never answered).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

var (
	base   = flag.String("base", "", "server URL")
	logf   = flag.String("log", "", "execution log of the logging app")
	scens  = flag.String("scen", "", "comma-separated scenarios (default: all of the app's protocol)")
	occDur = flag.Float64("occ", 4, "occupant seconds")
	vbase  = flag.Float64("v", 1, "victim seconds (a scenario's index/1000 is added as its tag)")
)

var cfg struct {
	Version   string  `json:"version"`
	Protocol  string  `json:"protocol"`
	APIPrefix *string `json:"api_prefix"`
}

var t0 = time.Now()

func logp(format string, a ...any) {
	fmt.Printf("[%6.2fs] %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, a...))
}

func api(p string) string {
	pre := ""
	if cfg.APIPrefix != nil {
		pre = *cfg.APIPrefix
	}
	return *base + pre + "/" + p
}

func post(p, body string) string {
	resp, err := http.Post(api(p), "application/json", strings.NewReader(body))
	if err != nil {
		return "error " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
}

func join(hash string, secs float64) (string, string) {
	body := fmt.Sprintf(`{"data":[%g],"fn_index":0,"session_hash":%q,"event_data":null,"trigger_id":null}`, secs, hash)
	r := post("queue/join", body)
	var v struct {
		EventID string `json:"event_id"`
	}
	_, js, _ := strings.Cut(r, " ")
	_ = json.Unmarshal([]byte(js), &v)
	return v.EventID, r
}

// readStream reads the session's stream until stop says so or it ends; it
// returns the messages seen.
func readStream(ctx context.Context, hash string, stop func(msg string) bool) ([]string, int) {
	req, _ := http.NewRequestWithContext(ctx, "GET", api("queue/data")+"?session_hash="+url.QueryEscape(hash), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return []string{"error " + err.Error()}, 0
	}
	defer resp.Body.Close()
	var msgs []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			Msg string `json:"msg"`
		}
		_ = json.Unmarshal([]byte(d), &m)
		msgs = append(msgs, short(d))
		if stop(m.Msg) {
			break
		}
	}
	return msgs, resp.StatusCode
}

func short(s string) string {
	if len(s) > 140 {
		return s[:140] + "..."
	}
	return s
}

func ran(tag float64) (bool, string) {
	b, _ := os.ReadFile(*logf)
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l) // EXEC <unix time> START <seconds>
		if len(f) == 4 && f[0] == "EXEC" && f[2] == "START" {
			if v, _ := strconv.ParseFloat(f[3], 64); v == tag {
				return true, l
			}
		}
	}
	return false, ""
}

func main() {
	flag.Parse()
	resp, err := http.Get(*base + "/config")
	if err != nil {
		panic(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&cfg)
	resp.Body.Close()
	if cfg.Protocol == "" {
		cfg.Protocol = "ws"
	}
	logp("server %s: Gradio %s protocol %s", *base, cfg.Version, cfg.Protocol)
	if *scens == "" {
		*scens = "never,drop,cancel,reset,dropcancel,canceldrop,readcancel,readdrop"
		if cfg.Protocol == "ws" || cfg.Protocol == "sse" {
			*scens = "close,closelater,nodata"
		}
	}
	for i, sc := range strings.Split(*scens, ",") {
		tag := *vbase + float64(i+1)/1000 + float64(time.Now().Unix()%100)/100000
		tag, _ = strconv.ParseFloat(strconv.FormatFloat(tag, 'f', 5, 64), 64)
		run(sc, tag)
	}
}

func run(sc string, tag float64) {
	logp("=== scenario %s (victim slow(%g))", sc, tag)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	switch cfg.Protocol {
	case "ws":
		runWS(ctx, sc, tag)
	case "sse":
		runV0(ctx, sc, tag)
	default:
		runSession(ctx, sc, tag)
	}
	wait := time.Duration((*occDur+tag+2.5)*float64(time.Second)) - time.Since(start)
	time.Sleep(wait)
	ok, line := ran(tag)
	if ok {
		logp("RESULT %s: the victim RAN (%s)", sc, line)
	} else {
		logp("RESULT %s: the victim never ran (%.1fs after it was joined)", sc, time.Since(start).Seconds())
	}
}

// occupant joins slow(occ) in a session of its own and reads its stream in
// the background; it returns once the call started.
func occupantSession(ctx context.Context) {
	h := "occ" + strconv.FormatInt(time.Now().UnixNano(), 36)
	id, r := join(h, *occDur)
	logp("occupant join slow(%g): %s (event %s)", *occDur, r, id)
	started := make(chan struct{})
	go func() {
		once := false
		readStream(ctx, h, func(m string) bool {
			if m == "process_starts" && !once {
				once = true
				close(started)
			}
			return m == "process_completed"
		})
	}()
	select {
	case <-started:
		logp("occupant started")
	case <-time.After(10 * time.Second):
		logp("occupant did not start in 10 s")
	}
}

func drop(ctx context.Context, h string) {
	tctx, tc := context.WithTimeout(ctx, 2*time.Second)
	defer tc()
	msgs, code := readStream(tctx, h, func(string) bool { return true })
	logp("opened the victim's stream (HTTP %d), first message %v, and dropped it", code, msgs)
}

func recheck(ctx context.Context, h string) {
	time.Sleep(300 * time.Millisecond)
	tctx, tc := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer tc()
	msgs, code := readStream(tctx, h, func(string) bool { return true })
	logp("a new stream of the victim's session 300 ms later: HTTP %d %v", code, msgs)
}

func runSession(ctx context.Context, sc string, tag float64) {
	occupantSession(ctx)
	h := "vic" + strconv.FormatInt(time.Now().UnixNano(), 36)
	id, r := join(h, tag)
	logp("victim join: %s", r)
	time.Sleep(300 * time.Millisecond)
	cancelBody := fmt.Sprintf(`{"session_hash":%q,"fn_index":0,"event_id":%q}`, h, id)
	resetBody := fmt.Sprintf(`{"event_id":%q}`, id)
	switch sc {
	case "never":
		logp("the victim's stream is never opened")
	case "drop":
		drop(ctx, h)
		recheck(ctx, h)
	case "cancel":
		logp("POST cancel %s -> %s", cancelBody, post("cancel", cancelBody))
	case "reset":
		logp("POST reset %s -> %s", resetBody, post("reset", resetBody))
	case "dropcancel":
		drop(ctx, h)
		recheck(ctx, h)
		logp("POST cancel %s -> %s", cancelBody, post("cancel", cancelBody))
	case "canceldrop":
		logp("POST cancel %s -> %s", cancelBody, post("cancel", cancelBody))
		drop(ctx, h)
	case "readcancel":
		// the stream is open and stays open; the cancel comes while it is read
		go func() {
			msgs, code := readStream(ctx, h, func(m string) bool { return m == "process_completed" })
			logp("the victim's stream (HTTP %d) ended: %v", code, msgs)
		}()
		time.Sleep(300 * time.Millisecond)
		logp("POST cancel %s -> %s", cancelBody, post("cancel", cancelBody))
	case "readdrop":
		// the stream was open for a while (the caller read), then dropped
		rctx, rc := context.WithCancel(ctx)
		go func() {
			msgs, code := readStream(rctx, h, func(m string) bool { return m == "process_completed" })
			logp("the victim's stream (HTTP %d) ended: %v", code, msgs)
		}()
		time.Sleep(1 * time.Second)
		rc()
		logp("dropped the victim's stream after reading it for 1 s")
		recheck(ctx, h)
	default:
		logp("unknown scenario")
	}
}

// v0 (Gradio 4.0-4.8): GET queue/join is the call's own stream.
func v0Join(ctx context.Context, h string, secs float64, stop func(msg string) bool, answer bool) []string {
	u := api("queue/join") + "?fn_index=0&session_hash=" + url.QueryEscape(h)
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return []string{"error " + err.Error()}
	}
	defer resp.Body.Close()
	var msgs []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			Msg     string `json:"msg"`
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal([]byte(d), &m)
		msgs = append(msgs, short(d))
		if m.Msg == "send_data" && answer {
			body := fmt.Sprintf(`{"data":[%g],"fn_index":0,"session_hash":%q,"event_id":%q,"event_data":null}`, secs, h, m.EventID)
			logp("send_data for slow(%g): POST queue/data -> %s", secs, post("queue/data", body))
		}
		if stop(m.Msg) {
			break
		}
	}
	return msgs
}

func runV0(ctx context.Context, sc string, tag float64) {
	started := make(chan struct{})
	go func() {
		once := false
		v0Join(ctx, "occ"+strconv.FormatInt(time.Now().UnixNano(), 36), *occDur, func(m string) bool {
			if m == "process_starts" && !once {
				once = true
				close(started)
			}
			return m == "process_completed"
		}, true)
	}()
	<-started
	logp("occupant started")
	h := "vic" + strconv.FormatInt(time.Now().UnixNano(), 36)
	switch sc {
	case "close":
		tctx, tc := context.WithTimeout(ctx, 2*time.Second)
		msgs := v0Join(tctx, h, tag, func(string) bool { return true }, true)
		tc()
		logp("victim GET queue/join: first message %v; closed its connection", msgs)
	case "closelater":
		tctx, tc := context.WithTimeout(ctx, 1500*time.Millisecond)
		msgs := v0Join(tctx, h, tag, func(string) bool { return false }, true)
		tc()
		logp("victim GET queue/join read for 1.5 s: %v; closed its connection", msgs)
	case "nodata":
		go func() {
			msgs := v0Join(ctx, h, tag, func(m string) bool { return m == "process_completed" }, false)
			logp("victim stream (send_data never answered) ended: %v", msgs)
		}()
	default:
		logp("unknown scenario")
	}
}

// ws (Gradio 3.x): one WebSocket per call.
func wsJoin(ctx context.Context, h string, secs float64, stop func(msg string) bool, answer bool) []string {
	u := strings.Replace(*base, "http", "ws", 1) + "/queue/join"
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		return []string{"error " + err.Error()}
	}
	defer c.CloseNow()
	var msgs []string
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			msgs = append(msgs, "read: "+err.Error())
			return msgs
		}
		var m struct {
			Msg string `json:"msg"`
		}
		_ = json.Unmarshal(b, &m)
		msgs = append(msgs, short(string(b)))
		switch m.Msg {
		case "send_hash":
			_ = c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"fn_index":0,"session_hash":%q}`, h)))
		case "send_data":
			if answer {
				_ = c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"data":[%g],"fn_index":0,"session_hash":%q,"event_data":null}`, secs, h)))
			}
		}
		if stop(m.Msg) {
			_ = c.Close(websocket.StatusNormalClosure, "")
			return msgs
		}
	}
}

func runWS(ctx context.Context, sc string, tag float64) {
	started := make(chan struct{})
	go func() {
		once := false
		wsJoin(ctx, "occ"+strconv.FormatInt(time.Now().UnixNano(), 36), *occDur, func(m string) bool {
			if m == "process_starts" && !once {
				once = true
				close(started)
			}
			return m == "process_completed"
		}, true)
	}()
	<-started
	logp("occupant started")
	h := "vic" + strconv.FormatInt(time.Now().UnixNano(), 36)
	switch sc {
	case "close":
		msgs := wsJoin(ctx, h, tag, func(m string) bool { return m == "estimation" }, true)
		logp("victim WebSocket: %v; closed (1000) before send_data", msgs)
	case "closelater":
		tctx, tc := context.WithTimeout(ctx, 1500*time.Millisecond)
		msgs := wsJoin(tctx, h, tag, func(string) bool { return false }, true)
		tc()
		logp("victim WebSocket read for 1.5 s: %v; dropped", msgs)
	case "nodata":
		go func() {
			msgs := wsJoin(ctx, h, tag, func(m string) bool { return m == "process_completed" }, false)
			logp("victim WebSocket (send_data never answered) ended: %v", msgs)
		}()
	default:
		logp("unknown scenario")
	}
}
