package gradio_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startSim starts a simulated app in mode with compressed time.
func startSim(t testing.TB, mode gradiotest.Mode, app *gradiotest.App, tweak func(*gradiotest.Server)) *gradiotest.Server {
	t.Helper()
	s := gradiotest.NewUnstartedServer(app)
	s.Mode = mode
	s.StepDelay = 5 * time.Millisecond
	s.TimeScale = 0.01
	if mode == gradiotest.Gradio4SSE {
		// The sim scales v0's 5 s send_data deadline too; keep it real so
		// loaded machines do not drop events.
		s.TimeScale = 1
	}
	s.HeartbeatInterval = 200 * time.Millisecond
	if tweak != nil {
		tweak(s)
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func connect(t testing.TB, url string, opts ...gradio.Option) *gradio.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := gradio.Connect(ctx, url, opts...)
	if err != nil {
		t.Fatalf("Connect(%s): %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
