package gradiotest

import (
	"context"
	"strings"

	"github.com/gradiopool/gradiopool/internal/backoff"
)

// ChatApp returns an app whose outputs are nested JSON, to exercise
// generator diffs the way chat UIs do:
//
//	fn  api_name  inputs                      outputs
//	0   chat      message, gr.State history   messages (JSON list of {"role","content"}), State
//	1   echo      json                        json
//
// chat streams the assistant's reply word by word (one yield per
// StepDelay) as an OpenAI-style message list, so later process_generating
// messages carry edits like ["append",[1,"content"]," word"] and ["add",[k],{...}].
func ChatApp() *App {
	a := &App{Title: "gradiotest chat app"}
	a.HandleGenerator("chat", chat,
		[]Component{Textbox("message"), State([]any{})},
		[]Component{JSON("messages"), State(nil)}).Description = "streams a reply as a message list"
	a.Handle("echo", func(_ context.Context, c *Call) ([]any, error) {
		return []any{c.Inputs[0]}, nil
	}, []Component{JSON("value")}, []Component{JSON("value")}).Description = "returns its JSON input"
	return a
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func chat(ctx context.Context, c *Call, yield func(...any) error) error {
	msg, err := c.String(0)
	if err != nil {
		return err
	}
	var history []chatMessage
	if len(c.Inputs) > 1 && string(c.Inputs[1]) != "null" {
		if err := c.Decode(1, &history); err != nil {
			return err
		}
	}
	history = append(history, chatMessage{"user", msg}, chatMessage{"assistant", ""})
	reply := strings.Fields("You said: " + msg)
	for i, w := range reply {
		if i > 0 {
			w = " " + w
		}
		history[len(history)-1].Content += w
		if err := backoff.Sleep(ctx, c.StepDelay()); err != nil {
			return err
		}
		snapshot := append([]chatMessage(nil), history...)
		if err := yield(snapshot, snapshot); err != nil {
			return err
		}
	}
	return nil
}
