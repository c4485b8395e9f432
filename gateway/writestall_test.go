package gateway_test

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorCallerThatStopsReadingIsCut (issue 32 item 3): a caller
// that opens its stream and then takes no byte of it (a client stuck, or
// an attacker: TCP keeps such a connection open for as long as its peer
// answers) is cut once a write to it has made no progress for the write
// stall bound, and its call ends: its slot is free again. Before, the
// relay of its replica's stream waited on that write for ever, so the
// call held its slot even after it ended at the replica (its completion
// was never read). Here the call streams 8 MiB of partial outputs (more
// than the loopback's buffers take) and then waits, so that only the cut
// can free its slot while the test looks.
func TestFrontDoorCallerThatStopsReadingIsCut(t *testing.T) {
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	app := gradiotest.NewApp()
	app.HandleGenerator("flood", func(ctx context.Context, _ *gradiotest.Call, yield func(...any) error) error {
		for i := range 8 {
			if err := yield(strconv.Itoa(i) + strings.Repeat("f", 1<<20)); err != nil {
				return err
			}
		}
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return yield("end")
	}, []gradiotest.Component{gradiotest.Number("n")}, []gradiotest.Component{gradiotest.Textbox("out")})
	sim := gradiotest.NewServer(app)
	t.Cleanup(sim.Close)
	_, g, _ := frontGatewayOver(t, []string{sim.URL}, nil)
	g.SetWriteStall(200 * time.Millisecond)
	base, _ := serveFake(t, g)
	fn := fdtest.FnIndex(t, base, "flood")
	fdtest.JoinAt(t, base, "stuck", `"data":[1],"fn_index":`+strconv.Itoa(fn))
	// The caller's stream, on a connection whose receive buffer is small
	// (set before the connection is made, so the window is) and never read.
	c := dialSmallWindow(t, strings.TrimPrefix(base, "http://"))
	defer c.Close()
	if _, err := io.WriteString(c, "GET /gradio_api/queue/data?session_hash=stuck HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	waitInFlight(t, g, 1) // the call runs, its stream open
	waitInFlight(t, g, 0) // cut: the call ended with its stream
}
