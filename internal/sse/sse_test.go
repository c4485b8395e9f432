package sse_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gradiopool/gradiopool/internal/sse"
)

type ev struct {
	Type, Data, ID string
	Retry          int
}

func readAll(r *sse.Reader) ([]ev, error) {
	var out []ev
	for {
		e, err := r.Next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, ev{e.Type, string(e.Data), e.ID, e.Retry})
	}
}

func TestReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []ev
	}{
		{"gradio", "data: {\"msg\":\"heartbeat\"}\n\n", []ev{{Data: `{"msg":"heartbeat"}`}}},
		{"two", "data: a\n\ndata: b\n\n", []ev{{Data: "a"}, {Data: "b"}}},
		{"multi-line", "data: a\ndata: b\ndata\n\n", []ev{{Data: "a\nb\n"}}},
		{"event id retry", "event: complete\nid: 7\nretry: 300\ndata: [1]\n\n", []ev{{"complete", "[1]", "7", 300}}},
		{"id persists", "id: 1\ndata: a\n\ndata: b\n\n", []ev{{Data: "a", ID: "1"}, {Data: "b", ID: "1"}}},
		{"comments", ": keep-alive\n\n:x\ndata: a\n: mid\n\n", []ev{{Data: "a"}}},
		{"crlf", "data: a\r\ndata: b\r\n\r\nevent: e\r\ndata: c\r\n\r\n", []ev{{Data: "a\nb"}, {"e", "c", "", 0}}},
		{"cr", "data: a\rdata: b\r\rdata: c\r\r", []ev{{Data: "a\nb"}, {Data: "c"}}},
		{"no space", "data:x\n\n", []ev{{Data: "x"}}},
		{"two spaces", "data:  x\n\n", []ev{{Data: " x"}}},
		{"bom", "\xef\xbb\xbfdata: a\n\n", []ev{{Data: "a"}}},
		{"unterminated dropped", "data: a\n\ndata: b\n", []ev{{Data: "a"}}},
		{"unterminated no newline", "data: a\n\ndata: b", []ev{{Data: "a"}}},
		{"unknown field", "foo: bar\ndata: a\n\n", []ev{{Data: "a"}}},
		{"bad retry", "retry: x\ndata: a\n\n", []ev{{Data: "a"}}},
		{"event only", "event: heartbeat\n\n", []ev{{Type: "heartbeat"}}},
		{"empty data", "data:\n\n", []ev{{Data: ""}}},
		{"blank lines", "\n\n\ndata: a\n\n", []ev{{Data: "a"}}},
	}
	for _, tt := range tests {
		for _, mode := range []string{"whole", "bytes", "half"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				var r io.Reader = strings.NewReader(tt.in)
				switch mode {
				case "bytes":
					r = iotest.OneByteReader(r)
				case "half":
					r = iotest.HalfReader(r)
				}
				got, err := readAll(sse.NewReader(r))
				if err != nil {
					t.Fatal(err)
				}
				if len(got) == 0 && len(tt.want) == 0 {
					return
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("got %+v\nwant %+v", got, tt.want)
				}
			})
		}
	}
}

func TestLineTooLong(t *testing.T) {
	r := sse.NewReaderSize(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 50)
	if _, err := r.Next(); !errors.Is(err, sse.ErrLineTooLong) {
		t.Fatalf("err %v", err)
	}
	long := strings.Repeat("y", 100<<10) // longer than the internal buffer
	r = sse.NewReaderSize(strings.NewReader("data: "+long+"\r\n\r\n"), 1<<20)
	e, err := r.Next()
	if err != nil || string(e.Data) != long {
		t.Fatalf("long line: %v (%d bytes)", err, len(e.Data))
	}
}

func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	r := sse.NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)))
	if e, err := r.Next(); err != nil || string(e.Data) != "a" {
		t.Fatalf("first: %v", err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

// TestTranscripts reads every captured stream: each event must be one JSON
// object (or ALIVE) and nothing may be left over.
func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.sse")
	if len(files) == 0 {
		t.Fatal("no testdata")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(sse.NewReader(iotest.HalfReader(bytes.NewReader(b))))
		if err != nil {
			t.Fatal(err)
		}
		want := strings.Count(string(b), "\n\n")
		if len(got) != want {
			t.Errorf("%s: %d events, want %d", f, len(got), want)
		}
		for _, e := range got {
			if e.Data != "ALIVE" && !strings.HasPrefix(e.Data, "{") {
				t.Errorf("%s: event %q", f, e.Data)
			}
		}
	}
}

// reference is a direct transcription of the WHATWG algorithm, used by the
// fuzz test as an oracle.
func reference(in string) []ev {
	in = strings.TrimPrefix(in, "\xef\xbb\xbf")
	in = strings.ReplaceAll(in, "\r\n", "\n")
	in = strings.ReplaceAll(in, "\r", "\n")
	lines := strings.Split(in, "\n")
	complete := strings.HasSuffix(in, "\n")
	if complete {
		lines = lines[:len(lines)-1]
	} else {
		lines = lines[:len(lines)-1] // the unterminated last line is never dispatched
	}
	var out []ev
	var data []string
	var typ, id string
	retry := 0
	hasData := false
	for _, l := range lines {
		if l == "" {
			if hasData || typ != "" {
				out = append(out, ev{typ, strings.Join(data, "\n"), id, retry})
			}
			data, typ, hasData = nil, "", false
			continue
		}
		if l[0] == ':' {
			continue
		}
		name, value, _ := strings.Cut(l, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "data":
			data = append(data, value)
			hasData = true
		case "event":
			typ = value
		case "id":
			if !strings.Contains(value, "\x00") {
				id = value
			}
		case "retry":
			if n, err := strconv.Atoi(value); err == nil && n >= 0 {
				retry = n
			}
		}
	}
	return out
}

func FuzzReader(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.sse")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		if len(b) > 4096 {
			b = b[:4096]
		}
		f.Add(b)
	}
	for _, s := range []string{"data: a\r\n\r\n", "data: a\rdata: b\r\r", ":c\n\nevent: x\nid: 1\nretry: 5\ndata\n\n", "\xef\xbb\xbfdata: a\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := reference(string(b))
		for _, r := range []io.Reader{bytes.NewReader(b), iotest.OneByteReader(bytes.NewReader(b))} {
			got, err := readAll(sse.NewReader(r))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 && len(want) == 0 {
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("input %q\n got %+v\nwant %+v", b, got, want)
			}
		}
	})
}

// endless repeats pattern until n bytes were read, then ends: a hostile
// replica's stream, kept finite so that a reader without bounds ends too
// (and the test fails instead of hanging).
type endless struct {
	pattern []byte
	n, off  int
}

func (e *endless) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && e.n > 0 {
		c := copy(p[k:min(len(p), k+e.n)], e.pattern[e.off:])
		e.off = (e.off + c) % len(e.pattern)
		k += c
		e.n -= c
	}
	return k, nil
}

// TestBoundsAgainstEndlessStreams: a line that never ends and an event
// whose data lines never meet a blank line both stop at the limit with a
// typed error, instead of growing one buffer with the stream.
func TestBoundsAgainstEndlessStreams(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		name    string
		pattern string
		want    error
	}{
		{"endless line", "x", sse.ErrLineTooLong},
		{"endless data line", "data: xxxxxxxxxxxxxxxx", sse.ErrLineTooLong},
		{"event without end", "data: 0123456789abcdef\n", sse.ErrEventTooLarge},
		{"event without end, CRLF", "data: 0123456789abcdef\r\n", sse.ErrEventTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &endless{pattern: []byte(tc.pattern), n: 64 * limit}
			r := sse.NewReaderSize(src, limit)
			_, err := r.Next()
			if !errors.Is(err, tc.want) {
				t.Fatalf("Next = %v, want %v", err, tc.want)
			}
			if read := 64*limit - src.n; read > 2*limit {
				t.Errorf("read %d bytes before giving up, limit %d", read, limit)
			}
		})
	}
}

// TestLongLineAcrossReads: a line spanning many reads and mixed line ends
// arrive intact (the carried part is joined once, not per read).
func TestLongLineAcrossReads(t *testing.T) {
	long := strings.Repeat("abcdefgh", 1<<17) // 1 MiB, many 16 KiB reads
	in := "data: " + long + "\r\ndata: tail\rid: 7\n\n" + "data: " + long + "\r\r"
	got, err := readAll(sse.NewReader(iotest.HalfReader(strings.NewReader(in))))
	if err != nil {
		t.Fatal(err)
	}
	want := []ev{{Data: long + "\ntail", ID: "7"}, {Data: long, ID: "7"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %d events (first data len %d), want 2", len(got), len(got[0].Data))
	}
}

// BenchmarkLongLine reads one event whose single data line is size bytes.
// The time per byte stays flat as the line grows (it grew with the line's
// length before: the carried part was copied and rescanned on every read).
func BenchmarkLongLine(b *testing.B) {
	for _, size := range []int{1 << 20, 4 << 20, 16 << 20} {
		in := []byte("data: " + strings.Repeat("x", size) + "\n\n")
		b.Run(strconv.Itoa(size>>20)+"MiB", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				r := sse.NewReader(bytes.NewReader(in))
				if _, err := r.Next(); err != nil {
					b.Fatal(err)
				}
				r.Release()
			}
		})
	}
}
