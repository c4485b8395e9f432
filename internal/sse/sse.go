package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime"
	"strconv"
	"sync"
)

// DefaultMaxLine is the longest line (in bytes) a Reader accepts when
// NewReader is used: large enough for a Gradio output carrying a base64 image.
const DefaultMaxLine = 64 << 20

// ErrLineTooLong is returned by Next when a line exceeds the Reader's limit.
var ErrLineTooLong = errors.New("sse: line too long")

// ErrEventTooLarge is returned by Next when an event's data (its "data:"
// lines joined) exceeds the Reader's limit: a stream that sends data lines
// and never the blank line that ends the event cannot grow it without bound.
var ErrEventTooLarge = errors.New("sse: event too large")

// Event is one dispatched event.
type Event struct {
	// Type is the "event:" field; "" means the default type "message".
	Type string
	// Data is the concatenated "data:" lines, joined with "\n".
	// It aliases the Reader's buffer and is valid until the next call of Next.
	Data []byte
	// ID is the last "id:" field seen on the stream (it persists across
	// events, as the standard's last-event-id does).
	ID string
	// Retry is the last "retry:" value in milliseconds, or 0.
	Retry int
}

// Reader reads events from a stream. It is not safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	max     int
	data    []byte
	typ     string
	id      string
	retry   int
	buf     []byte   // a finished line that began in carry (the former carry)
	lines   [][]byte // complete lines of buf not yet returned
	carry   []byte   // an unterminated line continued by the next chunk
	err     error    // sticky read error (io.EOF at the end)
	started bool     // the optional UTF-8 BOM was checked
	skipLF  bool     // the previous chunk ended in CR: a leading LF belongs to it

	// held is the capacity of data, buf and carry: what the Reader keeps
	// beyond the read buffer. Past allow it is charged to acct's Budget.
	held    int
	allow   int
	acct    *account // nil: no Budget
	cleanup runtime.Cleanup
}

// NewReader returns a Reader with a line and event limit of DefaultMaxLine.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, DefaultMaxLine) }

// NewReaderBudget returns a Reader with a line and event limit of maxLine
// (<= 0: DefaultMaxLine) whose lines and events beyond DefaultAllowance
// are charged to b (nil: no total limit); when b has no room left, Next
// fails with ErrBudgetExhausted. Release gives the bytes back (a Reader
// dropped without it gives them back when it is collected).
func NewReaderBudget(r io.Reader, maxLine int, b *Budget) *Reader {
	rd := NewReaderSize(r, maxLine)
	if b != nil {
		rd.acct = &account{budget: b}
		rd.cleanup = runtime.AddCleanup(rd, (*account).refund, rd.acct)
	}
	return rd
}

// bufPool recycles the read buffers: a client opens a stream per call.
var bufPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// NewReaderSize returns a Reader whose lines, and events' data, may be at
// most maxLine bytes each.
func NewReaderSize(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	br := bufPool.Get().(*bufio.Reader)
	br.Reset(r)
	return &Reader{br: br, max: maxLine, allow: DefaultAllowance}
}

// Release returns the Reader's buffer for reuse; the Reader (and any
// Event.Data it returned) must not be used afterwards. Optional.
func (r *Reader) Release() {
	r.data, r.buf, r.carry, r.lines, r.held = nil, nil, nil, nil, 0
	if r.acct != nil {
		r.cleanup.Stop()
		r.acct.refund()
	}
	if r.br != nil {
		r.br.Reset(nil)
		bufPool.Put(r.br)
		r.br = nil
	}
}

// Next returns the next event. At the end of the stream it returns io.EOF;
// an event not terminated by an empty line before EOF is discarded, as the
// standard says. Other errors come from the underlying reader.
func (r *Reader) Next() (Event, error) {
	r.shrink()
	r.data = r.data[:0]
	r.typ = ""
	hasData := false
	for {
		line, err := r.readLine()
		if err != nil {
			if err == io.EOF && len(line) == 0 {
				return Event{}, io.EOF
			}
			if err != io.EOF {
				return Event{}, err
			}
			// Last line without terminator: process it, then report EOF
			// (an undispatched event is dropped).
			_ = r.field(line, &hasData)
			return Event{}, io.EOF
		}
		if len(line) == 0 {
			if !hasData && r.typ == "" {
				continue // empty event (e.g. after only comments or id:)
			}
			return Event{Type: r.typ, Data: r.data, ID: r.id, Retry: r.retry}, nil
		}
		if err := r.field(line, &hasData); err != nil {
			return Event{}, err
		}
	}
}

func (r *Reader) field(line []byte, hasData *bool) error {
	if line[0] == ':' {
		return nil // comment
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		n := len(value)
		if *hasData {
			n++
		}
		if len(r.data)+n > r.max {
			return ErrEventTooLarge
		}
		var err error
		if r.data, err = r.grow(r.data, n); err != nil {
			return err
		}
		if *hasData {
			r.data = append(r.data, '\n')
		}
		r.data = append(r.data, value...)
		*hasData = true
	case "event":
		r.typ = string(value)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.id = string(value)
		}
	case "retry":
		if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 {
			r.retry = n
		}
	}
	return nil
}

// readLine returns one line without its terminator, or the last
// unterminated line together with io.EOF. The slice is valid until the next
// call.
//
// Each byte of the stream is scanned once and copied at most once (into
// carry while its line is unfinished; the finished carry then becomes
// buf), so a line of n bytes costs O(n) however many reads it spans, and
// holds n bytes until the event's data copies it.
func (r *Reader) readLine() ([]byte, error) {
	for {
		if len(r.lines) > 0 {
			l := r.lines[0]
			r.lines = r.lines[1:]
			return l, nil
		}
		if r.err != nil {
			if len(r.carry) > 0 {
				l := r.carry
				r.carry = nil
				return l, r.err
			}
			return nil, r.err
		}
		chunk, err := r.br.ReadSlice('\n')
		if !r.started && len(chunk) > 0 {
			r.started = true
			chunk = bytes.TrimPrefix(chunk, []byte("\xef\xbb\xbf"))
		}
		if r.skipLF && len(chunk) > 0 {
			r.skipLF = false
			if chunk[0] == '\n' {
				chunk = chunk[1:]
			}
		}
		// Fast path: one LF-terminated line without CR and nothing carried.
		if err == nil && len(r.carry) == 0 && bytes.IndexByte(chunk, '\r') < 0 {
			if len(chunk)-1 > r.max {
				return nil, ErrLineTooLong
			}
			return chunk[:len(chunk)-1], nil
		}
		if err := r.split(chunk); err != nil {
			return nil, err
		}
		switch {
		case err == bufio.ErrBufferFull:
		case err != nil:
			r.err = err
		}
	}
}

// split cuts chunk into lines ended by LF, CRLF or CR and queues them in
// r.lines; the unterminated rest is appended to r.carry. The first line
// continues r.carry. Lines alias chunk (valid until the next read, which
// comes only once r.lines is empty) or r.buf.
func (r *Reader) split(chunk []byte) error {
	start := 0
	for i := 0; i < len(chunk); i++ {
		c := chunk[i]
		if c != '\n' && c != '\r' {
			continue
		}
		line := chunk[start:i]
		if len(r.carry) > 0 {
			if len(r.carry)+len(line) > r.max {
				return ErrLineTooLong
			}
			// The carried part becomes the line, and the old line's
			// buffer the next carry: each byte is copied once here.
			carry, err := r.grow(r.carry, len(line))
			if err != nil {
				return err
			}
			line = append(carry, line...)
			r.buf, r.carry = line, r.buf[:0]
		}
		r.lines = append(r.lines, line)
		if c == '\r' {
			if i+1 < len(chunk) && chunk[i+1] == '\n' {
				i++
			} else if i+1 == len(chunk) {
				r.skipLF = true
			}
		}
		start = i + 1
	}
	rest := chunk[start:]
	if len(r.carry)+len(rest) > r.max {
		return ErrLineTooLong
	}
	carry, err := r.grow(r.carry, len(rest))
	if err != nil {
		return err
	}
	r.carry = append(carry, rest...)
	return nil
}

// grow returns s with room for n more bytes. A new array is charged to
// the Budget before it is allocated, so a stream refused has not
// allocated it either.
func (r *Reader) grow(s []byte, n int) ([]byte, error) {
	need := len(s) + n
	if need <= cap(s) {
		return s, nil
	}
	c := max(need, 2*cap(s), 512)
	if cap(s) >= 1<<20 {
		// Past 1 MiB a quarter more, as append does: doubling a line of
		// 60 MiB would allocate 120 MiB for the last few bytes.
		c = max(need, cap(s)+cap(s)/4)
	}
	if err := r.charge(c - cap(s)); err != nil {
		return s, err
	}
	ns := make([]byte, len(s), c)
	copy(ns, s)
	return ns, nil
}

// charge counts delta more bytes held (negative: fewer) and takes from,
// or gives back to, the Budget what lies beyond the allowance.
func (r *Reader) charge(delta int) error {
	held := r.held + delta
	if r.acct != nil {
		over := int64(max(0, held-r.allow))
		switch charged := r.acct.charged.Load(); {
		case over > charged:
			if !r.acct.budget.Take(over - charged) {
				return ErrBudgetExhausted
			}
			r.acct.charged.Store(over)
		case over < charged:
			r.acct.charged.Store(over)
			r.acct.budget.Give(charged - over)
		}
	}
	r.held = held
	return nil
}

// shrink drops the buffers grown past the allowance once nothing uses
// them (the previous Event's data included), so that a long-lived stream
// does not keep one large event's memory, or its Budget share, for good.
func (r *Reader) shrink() {
	drop := func(s *[]byte) {
		_ = r.charge(-cap(*s))
		*s = nil
	}
	if cap(r.data) > r.allow {
		drop(&r.data)
	}
	if len(r.lines) == 0 && cap(r.buf) > r.allow {
		drop(&r.buf)
	}
	if len(r.carry) == 0 && cap(r.carry) > r.allow {
		drop(&r.carry)
	}
}
