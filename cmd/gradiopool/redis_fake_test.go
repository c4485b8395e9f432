package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// respFake is a minimal in-process RESP server that knows only the
// commands the Redis assignment store sends; a copy of the one in
// pool/assign's tests (test files cannot be imported).
type respFake struct {
	addr string
	l    net.Listener
	wg   sync.WaitGroup

	mu   sync.Mutex // guards the data
	strs map[string]respStr
	sets map[string]map[string]float64
}

type respStr struct {
	v   string
	exp time.Time // zero: none
}

func startRespFake(t *testing.T) *respFake {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &respFake{addr: l.Addr().String(), l: l, strs: map[string]respStr{}, sets: map[string]map[string]float64{}}
	var conns sync.Map
	f.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			f.wg.Go(func() {
				defer conns.Delete(c)
				f.serve(c)
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		f.wg.Wait()
	})
	return f
}

func (f *respFake) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	var queued [][]string
	inMulti := false
	for {
		args, err := respReadCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(args[0])
		switch {
		case name == "MULTI":
			inMulti, queued = true, nil
			w.WriteString("+OK\r\n")
		case name == "EXEC":
			fmt.Fprintf(w, "*%d\r\n", len(queued))
			for _, q := range queued {
				w.WriteString(f.exec(q))
			}
			inMulti, queued = false, nil
		case inMulti:
			queued = append(queued, args)
			w.WriteString("+QUEUED\r\n")
		default:
			w.WriteString(f.exec(args))
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func respReadCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array length %q", line)
	}
	args := make([]string, n)
	for i := range args {
		hdr, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(hdr, "$")))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func respBulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }
func respInt(n int) string     { return fmt.Sprintf(":%d\r\n", n) }

func respScore(s string) (float64, error) {
	switch strings.ToLower(s) {
	case "+inf", "inf":
		return math.Inf(1), nil
	case "-inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// exec runs one command and returns its encoded reply.
func (f *respFake) exec(args []string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	name := strings.ToUpper(args[0])
	switch {
	case name == "PING":
		return "+PONG\r\n"
	case name == "GET" && len(args) == 2:
		s, ok := f.strs[args[1]]
		if !ok || (!s.exp.IsZero() && !now.Before(s.exp)) {
			delete(f.strs, args[1])
			return "$-1\r\n"
		}
		return respBulk(s.v)
	case name == "SET" && len(args) >= 3:
		s := respStr{v: args[2]}
		for i := 3; i+1 < len(args); i += 2 {
			n, err := strconv.ParseInt(args[i+1], 10, 64)
			if err != nil {
				return "-ERR value is not an integer\r\n"
			}
			switch strings.ToUpper(args[i]) {
			case "PX":
				s.exp = now.Add(time.Duration(n) * time.Millisecond)
			case "EX":
				s.exp = now.Add(time.Duration(n) * time.Second)
			default:
				return "-ERR syntax error\r\n"
			}
		}
		f.strs[args[1]] = s
		return "+OK\r\n"
	case name == "DEL":
		n := 0
		for _, k := range args[1:] {
			if _, ok := f.strs[k]; ok {
				delete(f.strs, k)
				n++
			}
		}
		return respInt(n)
	case name == "ZADD" && len(args) == 4:
		score, err := respScore(args[2])
		if err != nil {
			return "-ERR value is not a valid float\r\n"
		}
		set := f.sets[args[1]]
		if set == nil {
			set = map[string]float64{}
			f.sets[args[1]] = set
		}
		_, had := set[args[3]]
		set[args[3]] = score
		if had {
			return respInt(0)
		}
		return respInt(1)
	case name == "ZREM" && len(args) >= 3:
		n := 0
		for _, m := range args[2:] {
			if _, ok := f.sets[args[1]][m]; ok {
				delete(f.sets[args[1]], m)
				n++
			}
		}
		return respInt(n)
	case name == "ZREMRANGEBYSCORE" && len(args) == 4:
		lo, err1 := respScore(args[2])
		hi, err2 := respScore(args[3])
		if err1 != nil || err2 != nil {
			return "-ERR min or max is not a float\r\n"
		}
		n := 0
		for m, sc := range f.sets[args[1]] {
			if sc >= lo && sc <= hi {
				delete(f.sets[args[1]], m)
				n++
			}
		}
		return respInt(n)
	case name == "ZCARD" && len(args) == 2:
		return respInt(len(f.sets[args[1]]))
	}
	return fmt.Sprintf("-ERR unknown command '%s'\r\n", args[0])
}
