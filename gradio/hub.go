package gradio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// spaceInfo is the part of GET {hub}/api/spaces/{id} a client needs.
type spaceInfo struct {
	ID        string `json:"id"`
	Host      string `json:"host"`
	Subdomain string `json:"subdomain"`
	Private   bool   `json:"private"`
	Runtime   *struct {
		Stage string `json:"stage"`
	} `json:"runtime"`
}

// resolveSpace turns a Space id into the app's host, checking the runtime
// stage: RUNNING goes ahead; sleeping, building or starting Spaces are
// waited for up to the wake timeout (a request to the host wakes a sleeping
// Space); broken or paused ones fail fast with *SpaceError.
func (a *app) resolveSpace(ctx context.Context, id string) (string, error) {
	var deadline time.Time
	if a.set.wakeTimeout > 0 {
		deadline = time.Now().Add(a.set.wakeTimeout)
	}
	woken := false
	for {
		info, err := a.spaceInfo(ctx, id)
		if err != nil {
			return "", err
		}
		host := info.Host
		if host == "" {
			if host, err = a.spaceHost(ctx, id); err != nil {
				return "", err
			}
		}
		stage := "RUNNING"
		if info.Runtime != nil && info.Runtime.Stage != "" {
			stage = strings.ToUpper(info.Runtime.Stage)
		}
		switch stage {
		case "RUNNING", "RUNNING_BUILDING":
			return host, nil
		case "SLEEPING", "STOPPED", "BUILDING", "APP_STARTING", "RUNNING_APP_STARTING":
			if deadline.IsZero() {
				return "", &SpaceError{Space: id, Stage: stage}
			}
			if !woken && (stage == "SLEEPING" || stage == "STOPPED") {
				// Any request to the Space's host wakes it.
				woken = true
				a.wake(ctx, host)
			}
			wait := a.set.wakePoll
			if left := time.Until(deadline); left <= 0 {
				return "", &SpaceError{Space: id, Stage: stage, Err: fmt.Errorf("still %s after %s", strings.ToLower(stage), a.set.wakeTimeout)}
			} else if wait > left {
				wait = left
			}
			a.log.Info("gradio: waiting for space", "space", id, "stage", stage)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return "", ctx.Err()
			case <-t.C:
			}
		default:
			// PAUSED, RUNTIME_ERROR, BUILD_ERROR, CONFIG_ERROR, NO_APP_FILE,
			// DELETING and anything unknown: waiting will not help.
			return "", &SpaceError{Space: id, Stage: stage}
		}
	}
}

func (a *app) wake(ctx context.Context, host string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := a.newRequest(ctx, http.MethodGet, trimSlash(host)+"/config", nil)
	if err != nil {
		return
	}
	if resp, err := a.do(req, true); err == nil {
		_, _ = a.readBody(resp)
	}
}

func (a *app) hubGet(ctx context.Context, path string, v any) error {
	u := a.set.hubURL + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return &MetadataError{Src: a.src, Op: "hub", Err: err}
	}
	if a.set.hfToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.set.hfToken.reveal())
	}
	req.Header["User-Agent"] = userAgent
	resp, err := a.do(req, true)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ConnectError{Src: a.src, Err: fmt.Errorf("hub: %w", err)}
	}
	body, err := a.readBody(resp)
	if err != nil {
		return &ConnectError{Src: a.src, Err: fmt.Errorf("hub: %w", err)}
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		// The Hub answers 401 for private Spaces without a token and for
		// missing ones alike; say both.
		hint := "check the Space id; if the Space is private, give a Hugging Face token that can read it (HF_TOKEN)"
		if a.set.hfToken != "" {
			hint = "check the Space id and that the token can read it"
		}
		sentinel := ErrNotFound
		if resp.StatusCode != http.StatusNotFound && a.set.hfToken == "" {
			sentinel = ErrUnauthorized
		}
		return &MetadataError{Src: a.src, Op: "hub", StatusCode: resp.StatusCode, Err: fmt.Errorf("%w: space %q could not be accessed: %s", sentinel, a.src, hint)}
	default:
		return &MetadataError{Src: a.src, Op: "hub", StatusCode: resp.StatusCode, Err: errors.New(excerpt(body))}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &MetadataError{Src: a.src, Op: "hub", Err: fmt.Errorf("space metadata could not be loaded: %w", err)}
	}
	return nil
}

func (a *app) spaceInfo(ctx context.Context, id string) (*spaceInfo, error) {
	var info spaceInfo
	if err := a.hubGet(ctx, "/api/spaces/"+id, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

func (a *app) spaceHost(ctx context.Context, id string) (string, error) {
	var h struct {
		Host string `json:"host"`
	}
	if err := a.hubGet(ctx, "/api/spaces/"+id+"/host", &h); err != nil {
		return "", err
	}
	if h.Host == "" {
		return "", &MetadataError{Src: a.src, Op: "hub", Err: errors.New("space metadata could not be loaded: no host")}
	}
	return h.Host, nil
}
