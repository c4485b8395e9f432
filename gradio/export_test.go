package gradio

import (
	"context"
	"encoding/json"
)

// PredictWithHook is Predict (a quiet job, keeping no events) with an event
// hook, which the package's own callers pass internally.
func PredictWithHook(ctx context.Context, c *Client, h EventHook, endpoint string, args ...any) ([]json.RawMessage, error) {
	j, err := c.sess.submit(ctx, endpoint, args, jobOpts{quiet: true, hook: h})
	if err != nil {
		return nil, err
	}
	return j.Wait(ctx)
}

// HangUpDropsQueued exposes hangUpDropsQueued to the external tests.
var HangUpDropsQueued = hangUpDropsQueued

// Unexported names the external tests use.
const (
	ProtocolSSE   = protocolSSE
	ProtocolSSEv1 = protocolSSEv1
	ProtocolWS    = protocolWS
)

var (
	ParseAPIInfo   = parseAPIInfo
	ErrBodyTimeout = errBodyTimeout
)
