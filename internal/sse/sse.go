package sse

import (
	"bufio"
	"bytes"
	"cmp"
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
	br    *bufio.Reader
	max   int
	data  []byte
	typ   string
	id    string
	retry int
	buf   []byte   // a finished line that began in carry
	lines [][]byte // complete lines of buf not yet returned
	// carry is an unterminated line continued by the next chunk, in
	// blocks of blockSize (carryN bytes in all): a line that never ends
	// grows by a block at a time, without the copies (and garbage) of a
	// growing slice, and its blocks are reused by the next one.
	carry  [][]byte
	carryN int
	// dblocks hold the event's data (dataN bytes) the same way until it
	// is dispatched: an event whose blank line never comes holds no
	// garbage either. One block is handed out as is; more are joined
	// into data.
	dblocks [][]byte
	dataN   int
	err     error // sticky read error (io.EOF at the end)
	started bool  // the optional UTF-8 BOM was checked
	skipLF  bool  // the previous chunk ended in CR: a leading LF belongs to it

	// held is the capacity of data, buf and carry's blocks: what the Reader keeps
	// beyond the read buffer. Past allow it is charged to acct's Budget.
	held    int
	allow   int
	lent    int      // of held, charged to a Hold (Hold) until the next Next
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
//
// When r is an io.Closer (a response body), the Budget may cut the
// stream from another goroutine by closing it: when its part of the
// Budget held more than its fair share and another part needed room
// (ErrBudgetReclaimed), or when it held bytes while reading slower than
// the Budget's rate floor (ErrTooSlow); or, when b is a named party
// (Budget.Party) whose caller runs parallel streams and holds more than
// its fair share of the whole budget (or of its replica's part), for
// another party's room (ErrPartyOverShare). Next then returns that
// cause. On a part that is not a named party, the Reader is a party of its
// own.
func NewReaderBudget(r io.Reader, maxLine int, b *Budget) *Reader {
	if b == nil {
		return NewReaderSize(r, maxLine)
	}
	acct := &account{budget: b}
	acct.body, _ = r.(io.Closer)
	rd := NewReaderSize(countingReader{r: r, n: &acct.read}, maxLine)
	rd.acct = acct
	if b.root != nil {
		acct.budget = b.register(acct)
	}
	rd.cleanup = runtime.AddCleanup(rd, (*account).refund, rd.acct)
	return rd
}

// bufPool recycles the read buffers: a client opens a stream per call.
// They are bufio's default 4 KiB, not larger: every open stream holds its
// buffer while it waits, and a stream per call in flight made a 16 KiB
// buffer a third of that call's memory (the benchmark report's in-flight
// figures); Gradio's messages are mostly far smaller, and a longer line
// goes on in carry's blocks.
var bufPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

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

// Release returns the Reader's buffers for reuse, and what it holds of its
// Budget; the Reader (and any Event.Data it returned) must not be used
// afterwards. Optional: a Reader dropped without it gives its Budget share
// back when it is collected.
func (r *Reader) Release() {
	r.dropBlocks(&r.carry, &r.carryN)
	r.dropBlocks(&r.dblocks, &r.dataN)
	r.data, r.buf, r.carry, r.dblocks, r.lines, r.held = nil, nil, nil, nil, nil, 0
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

// Hold charges n more bytes to the Reader's account in its Budget, for
// what its consumer keeps of the event Next returned once it is decoded
// (an output on its way to its caller), until the Hold's Release: the
// bytes count against the same party's fair shares as the stream's own,
// and the stream stays one of its party's streams until every Hold is
// released, after Release too. It fails as a growing event does
// (ErrBudgetExhausted, ErrPartyOverShare, or the cause of a cut): the
// consumer then gives the event up. A cut of the stream gives the Hold's
// bytes back at once; Hold.Err then reports it. Without a Budget it holds
// nothing.
func (r *Reader) Hold(n int) (*Hold, error) {
	a := r.acct
	if a == nil || n <= 0 {
		return nil, nil
	}
	// The event's own bytes, charged to the Reader, pass to the Hold: the
	// Reader drops them at the next Next (or Release), and what is
	// decoded from them takes their place.
	st, err := a.lend(int64(n))
	if err != nil {
		return nil, err
	}
	r.lent += int(st.n)
	return st.grow(int64(n) - st.n)
}

// lend starts a Hold (registered in the account's holds, so that a
// Release of its stream keeps the account) with up to n of the bytes the
// stream is charged: they stop counting for the rate floor, which
// measures the stream's reading, not its consumer's keeping.
func (a *account) lend(n int64) (*holdState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cause != nil || a.released {
		return nil, cmp.Or(a.cause, errReleased)
	}
	a.holds++
	lent := min(n, a.charged)
	a.charged -= lent
	a.kept += lent
	if a.charged == 0 && a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	return &holdState{acct: a, n: lent}, nil
}

// Charge is Hold for bytes no event of the stream brought in: n new bytes
// that the consumer keeps (a generator's output rebuilt from a small
// diff, or outputs queued for a reader that fell behind), charged to the
// Reader's party until the Hold's Release, with the same refusals as
// Hold. It lends nothing from the Reader, so, unlike Hold, any goroutine
// may call it, also after the Reader's Release: it then holds nothing
// (nil, nil), the stream being over.
func (r *Reader) Charge(n int) (*Hold, error) { return r.acct.charge(n) }

// charge is Charge on the account (nil: no Budget).
func (a *account) charge(n int) (*Hold, error) {
	if a == nil || n <= 0 {
		return nil, nil
	}
	st, err := a.lend(0)
	if err == errReleased {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return st.grow(int64(n))
}

// grow takes more bytes from the account's budget into the Hold being
// made (registered in its account's holds), and returns it.
func (st *holdState) grow(more int64) (*Hold, error) {
	a := st.acct
	if more > 0 {
		if err := a.budget.take(more); err != nil {
			st.release()
			return nil, err
		}
		a.mu.Lock()
		if a.cause != nil { // cut meanwhile: what it took goes back
			cause := a.cause
			a.mu.Unlock()
			a.budget.Give(more)
			st.release()
			return nil, cause
		}
		a.kept += more
		st.n += more
		a.mu.Unlock()
	}
	h := &Hold{s: st}
	h.cleanup = runtime.AddCleanup(h, (*holdState).release, st)
	return h, nil
}

var errReleased = errors.New("sse: Hold on a released Reader")

// Next returns the next event. At the end of the stream it returns io.EOF;
// an event not terminated by an empty line before EOF is discarded, as the
// standard says. Other errors come from the underlying reader.
func (r *Reader) Next() (Event, error) {
	ev, err := r.next()
	if err != nil && r.acct != nil {
		if cause := r.acct.err(); cause != nil {
			return Event{}, cause // the Budget cut the stream: the read failed for that
		}
	}
	return ev, err
}

func (r *Reader) next() (Event, error) {
	r.dropBlocks(&r.dblocks, &r.dataN)
	r.shrink()
	if r.lent > 0 {
		// What the last event lent its Hold is dropped: count what is
		// left as the Reader's own again.
		r.lent = 0
		_ = r.charge(0)
	}
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
			data, err := r.eventData()
			if err != nil {
				return Event{}, err
			}
			return Event{Type: r.typ, Data: data, ID: r.id, Retry: r.retry}, nil
		}
		if err := r.field(line, &hasData); err != nil {
			return Event{}, err
		}
		r.lineDone(line)
	}
}

// lineDone drops buf once its line is processed when it grew past the
// allowance: a large event is then held once as its line, then once as
// its data, never as both and its join.
func (r *Reader) lineDone(line []byte) {
	if len(line) > 0 && len(r.buf) > 0 && &line[0] == &r.buf[0] && cap(r.buf) > r.allow {
		_ = r.charge(-cap(r.buf))
		r.buf = nil
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
		if r.dataN+n > r.max {
			return ErrEventTooLarge
		}
		if *hasData {
			if err := r.appendBlocks(&r.dblocks, &r.dataN, newline); err != nil {
				return err
			}
		}
		if err := r.appendBlocks(&r.dblocks, &r.dataN, value); err != nil {
			return err
		}
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
// Each byte of the stream is scanned once and copied at most twice (into
// carry's blocks while its line is unfinished, then into buf when the line
// ends, the blocks freed), so a line of n bytes costs O(n) however many
// reads it spans.
func (r *Reader) readLine() ([]byte, error) {
	for {
		if len(r.lines) > 0 {
			l := r.lines[0]
			// The slot is cleared: a line may be buf, which lineDone and
			// shrink drop (and stop counting), and the array behind
			// r.lines would otherwise keep it live until overwritten.
			r.lines[0] = nil
			r.lines = r.lines[1:]
			return l, nil
		}
		if r.err != nil {
			if r.carryN > 0 {
				l, err := r.joinCarry(nil)
				if err != nil {
					return nil, err
				}
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
		if err == nil && r.carryN == 0 && bytes.IndexByte(chunk, '\r') < 0 {
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
		if r.carryN > 0 {
			var err error
			if line, err = r.joinCarry(line); err != nil {
				return err
			}
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
	return r.appendCarry(chunk[start:])
}

var newline = []byte{'\n'}

// eventData is the dispatched event's data: its one block as is, or its
// blocks joined into data (allocated to its size, charged first).
func (r *Reader) eventData() ([]byte, error) {
	switch len(r.dblocks) {
	case 0:
		return r.data[:0], nil
	case 1:
		return r.dblocks[0], nil
	}
	data, err := r.grow(r.data[:0], r.dataN)
	if err != nil {
		return nil, err
	}
	for _, b := range r.dblocks {
		data = append(data, b...)
	}
	r.dropBlocks(&r.dblocks, &r.dataN)
	r.data = data
	return data, nil
}

// blockSize is the size of carry's blocks: a full read buffer.
const blockSize = 16 << 10

// blockPool recycles carry's blocks between lines and Readers. Blocks in
// it are counted by no Budget, so a Reader returns at most keepBlocks of
// those it drops at once (its allowance's worth) and leaves the rest to the
// collector: a 32 MB line's 2 000 blocks, pooled, stayed live beside the
// next line's buffers, uncounted, until they were reused or two
// collections passed (TestBudgetCountsWhatReadersHold).
const keepBlocks = DefaultAllowance / blockSize

var blockPool = sync.Pool{New: func() any { return new([blockSize]byte) }}

// appendCarry adds p to the unterminated line.
func (r *Reader) appendCarry(p []byte) error {
	if r.carryN+len(p) > r.max {
		return ErrLineTooLong
	}
	return r.appendBlocks(&r.carry, &r.carryN, p)
}

// appendBlocks adds p to the blocks of *list (*n bytes in all), a block at
// a time, each charged before it is taken.
func (r *Reader) appendBlocks(list *[][]byte, n *int, p []byte) error {
	for len(p) > 0 {
		if k := len(*list); k == 0 || len((*list)[k-1]) == blockSize {
			if err := r.charge(blockSize); err != nil {
				return err
			}
			*list = append(*list, blockPool.Get().(*[blockSize]byte)[:0])
		}
		last := &(*list)[len(*list)-1]
		c := copy((*last)[len(*last):blockSize], p)
		*last = (*last)[:len(*last)+c]
		p = p[c:]
		*n += c
	}
	return nil
}

// joinCarry ends the unterminated line with tail: it returns the whole
// line in buf (allocated to its size, charged first) and frees the blocks.
func (r *Reader) joinCarry(tail []byte) ([]byte, error) {
	if r.carryN+len(tail) > r.max {
		return nil, ErrLineTooLong
	}
	buf, err := r.grow(r.buf[:0], r.carryN+len(tail))
	if err != nil {
		return nil, err
	}
	for _, b := range r.carry {
		buf = append(buf, b...)
	}
	buf = append(buf, tail...)
	r.dropBlocks(&r.carry, &r.carryN)
	r.buf = buf
	return buf, nil
}

// dropBlocks gives back the share of the blocks of *list, returning the
// first keepBlocks of them to the pool.
func (r *Reader) dropBlocks(list *[][]byte, n *int) {
	for i, b := range *list {
		if i < keepBlocks {
			blockPool.Put((*[blockSize]byte)(b[:blockSize]))
		}
		(*list)[i] = nil
	}
	_ = r.charge(-len(*list) * blockSize)
	*list, *n = (*list)[:0], 0
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
	switch {
	case len(s) == 0:
		c = max(need, 512) // nothing to keep: no room ahead either
	case cap(s) >= 1<<20:
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
		if err := r.acct.set(int64(max(0, held-r.allow-r.lent))); err != nil && delta > 0 {
			return err
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
}
