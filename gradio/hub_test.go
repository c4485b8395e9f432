package gradio_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func TestSpaceResolution(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	hub := gradiotest.NewHub()
	defer hub.Close()
	hub.SetWakeDelay(50 * time.Millisecond)
	hub.AddSpace("owner/app", srv)
	ctx := testCtx(t)
	hubOpt := gradio.WithHubURL(hub.URL + "/")
	poll := gradio.WithWakePollInterval(20 * time.Millisecond)

	c := connect(t, "owner/app", hubOpt)
	if c.BaseURL() != srv.URL || c.SpaceID() != "owner/app" {
		t.Fatalf("base %q space %q", c.BaseURL(), c.SpaceID())
	}
	if out, err := c.Predict(ctx, "upper", "space"); err != nil || str(t, out[0]) != "SPACE" {
		t.Fatalf("predict: %v", err)
	}

	tests := []struct {
		stage     string
		wake      time.Duration
		ok        bool
		temporary bool
	}{
		{gradiotest.StagePaused, 0, false, false},
		{gradiotest.StageRuntimeError, 0, false, false},
		{gradiotest.StageNoAppFile, 0, false, false},
		{gradiotest.StageConfigError, 0, false, false},
		{gradiotest.StageBuildError, 0, false, false},
		{gradiotest.StageBuilding, 0, false, true},
		{gradiotest.StageSleeping, 0, false, true},
		{gradiotest.StageSleeping, 5 * time.Second, true, false},
		{gradiotest.StageBuilding, 100 * time.Millisecond, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.stage+"/"+tt.wake.String(), func(t *testing.T) {
			hub.SetStage("owner/app", tt.stage)
			defer hub.SetStage("owner/app", gradiotest.StageRunning)
			c, err := gradio.Connect(ctx, "owner/app", hubOpt, poll, gradio.WithWakeTimeout(tt.wake))
			if tt.ok {
				if err != nil {
					t.Fatalf("Connect: %v", err)
				}
				c.Close()
				return
			}
			var se *gradio.SpaceError
			if !errors.As(err, &se) || se.Stage != tt.stage || !errors.Is(err, gradio.ErrSpaceNotRunning) {
				t.Fatalf("err %v, want *SpaceError %s", err, tt.stage)
			}
			if se.Temporary() != tt.temporary {
				t.Errorf("Temporary %v", se.Temporary())
			}
		})
	}

	t.Run("building then running", func(t *testing.T) {
		hub.SetStageFor("owner/app", gradiotest.StageBuilding, 100*time.Millisecond)
		c, err := gradio.Connect(ctx, "owner/app", hubOpt, poll, gradio.WithWakeTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})

	t.Run("private", func(t *testing.T) {
		hub.SetPrivate("owner/app", "hf_tok")
		defer hub.SetPrivate("owner/app", "")
		_, err := gradio.Connect(ctx, "owner/app", hubOpt)
		var me *gradio.MetadataError
		if !errors.As(err, &me) || me.StatusCode != 401 || !errors.Is(err, gradio.ErrUnauthorized) {
			t.Fatalf("no token: %v", err)
		}
		_, err = gradio.Connect(ctx, "owner/app", hubOpt, gradio.WithHFToken("hf_wrong_secret"))
		if err == nil || strings.Contains(err.Error(), "hf_wrong_secret") {
			t.Fatalf("wrong token: %v", err)
		}
		c, err := gradio.Connect(ctx, "owner/app", hubOpt, gradio.WithHFToken("hf_tok"))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})

	t.Run("not found", func(t *testing.T) {
		_, err := gradio.Connect(ctx, "owner/missing", hubOpt)
		if !errors.Is(err, gradio.ErrNotFound) {
			t.Fatalf("err %v", err)
		}
	})
}
