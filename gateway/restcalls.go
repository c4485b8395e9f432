package gateway

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/gradiopool/gradiopool/gateway/restcall"
	"github.com/gradiopool/gradiopool/pool"
)

// startRESTCall reads, admits and starts a POST /gradio_api/call call for
// the front door's REST routes (restcall.CallsConfig.Start), as /v1 does
// its calls. The call outlives the POST: its deadline runs on the
// gateway's job context, not the request's, so a drain lets it finish.
func (g *Gateway) startRESTCall(w http.ResponseWriter, r *http.Request, eventID string, hold func(endpoint string) error) *restcall.StartedCall {
	if g.rejectDraining(w) {
		return nil
	}
	user, args, endpoint, aerr := g.readCall(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return nil
	}
	release, ok := g.beginClientCall(w, r)
	if !ok {
		return nil
	}
	ctx, cancel0, aerr := deadlineContext(g.jobsCtx, r)
	if aerr != nil {
		release()
		writeError(w, aerr)
		return nil
	}
	ctx = pool.WithRoute(ctx, routeCall)      // the door, on the pool's events of the call
	cancel := func() { cancel0(); release() } // the call counts until it ends
	if err := hold(endpoint); err != nil {
		cancel()
		writeError(w, refusalError(err))
		return nil
	}
	done := g.track()
	start := g.now()
	call, err := g.backend.Submit(ctx, user, pool.CallOptions{Party: g.eventParty(r)}, endpoint, args)
	if err != nil {
		cancel()
		done()
		g.failCall(w, r, routeCall, endpoint, g.now().Sub(start), err)
		return nil
	}
	wait := call.Waited()
	// The event id reads the call's result: logs name it by a keyed hash.
	eventTag := g.backend.UserTag(eventID)
	addLog(r, slog.String("endpoint", endpoint), slog.String("replica", call.Replica()), slog.String("event_tag", eventTag))
	end := func(err error) any {
		rec := CallRecord{Route: routeCall, Replica: call.Replica(), Endpoint: endpoint, Wait: wait, Total: g.now().Sub(start)}
		switch {
		case err == nil:
			g.metrics.observeCall(rec)
			return nil
		case errors.Is(err, restcall.ErrResultTooLarge):
			rec.Code = restcall.CodeResultTooLarge
			g.metrics.observeCall(rec)
			g.log.LogAttrs(ctx, slog.LevelWarn, "call stopped: its result is too large to keep", slog.String("event_tag", eventTag),
				slog.String("endpoint", endpoint), slog.String("replica", call.Replica()))
			return nil
		}
		e := callError(ctx, err)
		rec.Code = e.Code
		g.metrics.observeCall(rec)
		g.log.LogAttrs(ctx, slog.LevelWarn, "call failed", append([]slog.Attr{slog.String("event_tag", eventTag), slog.String("endpoint", endpoint),
			slog.String("replica", call.Replica())}, g.errorLogAttrs(e)...)...)
		payload := map[string]any{"error": e.Message, "code": e.Code}
		if e.Title != "" {
			payload["title"] = e.Title
		}
		return payload
	}
	return &restcall.StartedCall{Call: call, Ctx: ctx, Stop: cancel0, End: end,
		Done: func() { cancel(); done() }}
}

// refusalError is the gateway's answer to a front-door refusal.
func refusalError(err error) *apiError {
	var re *restcall.Refusal
	if errors.As(err, &re) {
		return &apiError{Status: re.Status, Code: re.Code, Message: re.Message, RetryAfter: re.RetryAfter}
	}
	return toAPIError(err)
}
