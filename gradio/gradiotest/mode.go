package gradiotest

import "fmt"

// Mode selects which Gradio generation the server imitates: the version in
// /config, the queue protocol, the API prefix and the message shapes.
type Mode string

// The modes. The zero Mode is Gradio5.
const (
	// Gradio5 is Gradio 5.49.1: protocol sse_v3, api_prefix /gradio_api,
	// show_api, compact JSON. The default, matching the captured transcripts.
	Gradio5 Mode = "gradio5"
	// Gradio6 is Gradio 6.25.0: as Gradio5 with api_visibility instead of
	// show_api and the used_cache/cache_duration/avg_time completion fields.
	Gradio6 Mode = "gradio6"
	// Gradio4SSEv3 is Gradio 4.44.1: protocol sse_v3 without api_prefix.
	Gradio4SSEv3 Mode = "gradio4-sse_v3"
	// Gradio4SSEv21 is Gradio 4.21.0: sse_v2.1 (diffs, FileData meta, the
	// server hangs up instead of sending close_stream).
	Gradio4SSEv21 Mode = "gradio4-sse_v2.1"
	// Gradio4SSEv2 is Gradio 4.20.1: sse_v2 (diffs, no close_stream).
	Gradio4SSEv2 Mode = "gradio4-sse_v2"
	// Gradio4SSEv1 is Gradio 4.16.0: sse_v1 (full values, no close_stream).
	Gradio4SSEv1 Mode = "gradio4-sse_v1"
	// Gradio4SSE is Gradio 4.8.0: protocol sse (v0), one GET queue/join
	// stream per event, send_data, POST queue/data.
	Gradio4SSE Mode = "gradio4-sse"
	// Gradio3WS is Gradio 3.50.2: no protocol in /config, one WebSocket
	// queue/join per call (send_hash, send_data), Gradio 3 file dicts
	// (ws.go). Not in Modes: only the tests that name it run it.
	Gradio3WS Mode = "gradio3-ws"
)

// Modes lists every mode, newest first.
var Modes = []Mode{Gradio5, Gradio6, Gradio4SSEv3, Gradio4SSEv21, Gradio4SSEv2, Gradio4SSEv1, Gradio4SSE}

// protocol generations, ordered.
const (
	protoV0 = iota
	protoV1
	protoV2
	protoV21
	protoV3
)

type modeInfo struct {
	version  string
	protocol string
	proto    int
	prefix   string
	major    int
}

var modeInfos = map[Mode]modeInfo{
	Gradio5:       {"5.49.1", "sse_v3", protoV3, "/gradio_api", 5},
	Gradio6:       {"6.25.0", "sse_v3", protoV3, "/gradio_api", 6},
	Gradio4SSEv3:  {"4.44.1", "sse_v3", protoV3, "", 4},
	Gradio4SSEv21: {"4.21.0", "sse_v2.1", protoV21, "", 4},
	Gradio4SSEv2:  {"4.20.1", "sse_v2", protoV2, "", 4},
	Gradio4SSEv1:  {"4.16.0", "sse_v1", protoV1, "", 4},
	Gradio4SSE:    {"4.8.0", "sse", protoV0, "", 4},
	Gradio3WS:     {"3.50.2", "ws", protoV0, "", 3},
}

// ParseMode accepts a mode name, a protocol name ("sse_v2.1") or a Gradio
// major version ("5", "6", "4").
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "5", "gradio5":
		return Gradio5, nil
	case "6":
		return Gradio6, nil
	case "4", "sse_v3-4":
		return Gradio4SSEv3, nil
	case "sse_v3":
		return Gradio5, nil
	case "sse_v2.1":
		return Gradio4SSEv21, nil
	case "sse_v2":
		return Gradio4SSEv2, nil
	case "sse_v1":
		return Gradio4SSEv1, nil
	case "sse", "sse_v0":
		return Gradio4SSE, nil
	case "ws", "3":
		return Gradio3WS, nil
	}
	if _, ok := modeInfos[Mode(s)]; ok {
		return Mode(s), nil
	}
	return "", fmt.Errorf("gradiotest: unknown mode %q", s)
}

func (m Mode) info() modeInfo {
	if i, ok := modeInfos[m]; ok {
		return i
	}
	return modeInfos[Gradio5]
}

// Version is the Gradio version the mode reports in /config.
func (m Mode) Version() string { return m.info().version }

// Protocol is the config "protocol" value of the mode ("ws" for Gradio
// 3, whose config has none: the Go client's name for it).
func (m Mode) Protocol() string { return m.info().protocol }

// APIPrefix is the config "api_prefix" of the mode ("" before Gradio 5).
func (m Mode) APIPrefix() string { return m.info().prefix }

func (m Mode) atLeast(p int) bool { return m.info().proto >= p }
func (m Mode) major() int         { return m.info().major }

// pythonStyle reports whether queue messages are written by Python's json
// module (Gradio 4) rather than orjson (Gradio 5+).
func (m Mode) pythonStyle() bool { return m.major() < 5 }
