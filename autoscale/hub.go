package autoscale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HubWindow is the Hugging Face Hub API's rate-limit window.
const HubWindow = 5 * time.Minute

// Runtime is the part of a Space's runtime JSON (GET
// /api/spaces/{id}/runtime) the policy reads.
type Runtime struct {
	Stage    string `json:"stage"`
	Hardware struct {
		Current   string `json:"current"`
		Requested string `json:"requested"`
	} `json:"hardware"`
	GCTimeout *int `json:"gcTimeout"`
}

// Space stages the policy acts on (huggingface_hub SpaceStage).
const (
	StageRunning  = "RUNNING"
	StagePaused   = "PAUSED"
	StageStopped  = "STOPPED"
	StageBuilding = "BUILDING"
	StageStarting = "APP_STARTING"
	StageRunBuild = "RUNNING_BUILDING"
	StageRunStart = "RUNNING_APP_STARTING"
)

// HubError is a refused Hub call. Forbidden (401/403) means the token may
// not manage the Space: the policy stops managing it.
type HubError struct {
	Op         string
	Space      string
	Status     int
	RetryAfter time.Duration // for 429
	Msg        string
}

func (e *HubError) Error() string {
	return fmt.Sprintf("autoscale: hub %s %s: %d %s", e.Op, e.Space, e.Status, e.Msg)
}

// Forbidden reports whether the Hub refused the token (401 or 403).
func (e *HubError) Forbidden() bool { return e.Status == 401 || e.Status == 403 }

// ErrHubBudget is returned, without a call, when the Hub call budget of the
// current window is spent or the Hub asked to wait (429).
var ErrHubBudget = errors.New("autoscale: hub call budget spent for this window")

// HubClient calls the Hub's Space runtime routes with the owner's token. It
// never asks for a factory reboot or a hardware change. It keeps to a call
// budget per HubWindow and, after a 429, makes no call until Retry-After.
type HubClient struct {
	base   string
	token  string
	hc     *http.Client
	budget int
	now    func() time.Time

	mu        sync.Mutex
	win       time.Time
	used      int
	blocked   time.Time
	perWindow []int // calls made in each finished window, last 288 (a day)
}

// NewHubClient returns a client of the Hub at base (e.g.
// https://huggingface.co, or the emulation's URL) using token, making at
// most budget calls per HubWindow (<= 0: 500). hc nil: a client with a 30 s
// time-out; now nil: time.Now.
func NewHubClient(base, token string, budget int, hc *http.Client, now func() time.Time) *HubClient {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	if now == nil {
		now = time.Now
	}
	if budget <= 0 {
		budget = 500
	}
	return &HubClient{base: strings.TrimSuffix(base, "/"), token: token, hc: hc, budget: budget, now: now}
}

// Runtime reads a Space's runtime.
func (c *HubClient) Runtime(ctx context.Context, space string) (Runtime, error) {
	return c.do(ctx, http.MethodGet, space, "runtime", nil)
}

// Pause pauses a Space (PAUSED at once; visitors do not wake it).
func (c *HubClient) Pause(ctx context.Context, space string) (Runtime, error) {
	return c.do(ctx, http.MethodPost, space, "pause", nil)
}

// Restart starts a paused or stopped Space (never a factory reboot).
func (c *HubClient) Restart(ctx context.Context, space string) (Runtime, error) {
	return c.do(ctx, http.MethodPost, space, "restart", nil)
}

// SetSleepTime sets the seconds idle before the Hub stops the Space (-1 never).
func (c *HubClient) SetSleepTime(ctx context.Context, space string, seconds int) (Runtime, error) {
	return c.do(ctx, http.MethodPost, space, "sleeptime", map[string]int{"seconds": seconds})
}

// CallsLastWindows lists the calls made in each finished window, oldest first.
func (c *HubClient) CallsLastWindows() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rollLocked(c.now())
	return append([]int(nil), c.perWindow...)
}

// Budget reports the calls left in this window and when calls may resume
// after a 429 (zero if not blocked).
func (c *HubClient) Budget() (left int, blockedUntil time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.rollLocked(now)
	if now.Before(c.blocked) {
		blockedUntil = c.blocked
	}
	return c.budget - c.used, blockedUntil
}

func (c *HubClient) rollLocked(now time.Time) {
	w := now.Truncate(HubWindow)
	if c.win.IsZero() {
		c.win = w
		return
	}
	for c.win.Before(w) {
		c.perWindow = append(c.perWindow, c.used)
		if len(c.perWindow) > 288 {
			c.perWindow = c.perWindow[1:]
		}
		c.used = 0
		c.win = c.win.Add(HubWindow)
		if len(c.perWindow) == 288 && c.win.Before(w) { // a long gap: skip ahead
			c.win = w
		}
	}
}

// take reserves one call of the budget.
func (c *HubClient) take() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.rollLocked(now)
	if now.Before(c.blocked) || c.used >= c.budget {
		return ErrHubBudget
	}
	c.used++
	return nil
}

func (c *HubClient) do(ctx context.Context, method, space, what string, body any) (Runtime, error) {
	var rt Runtime
	if strings.Count(space, "/") != 1 {
		return rt, fmt.Errorf("autoscale: %q is not a Space id (owner/name)", space)
	}
	if err := c.take(); err != nil {
		return rt, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return rt, err
		}
		rd = bytes.NewReader(b)
	}
	owner, name, _ := strings.Cut(space, "/")
	u := c.base + "/api/spaces/" + url.PathEscape(owner) + "/" + url.PathEscape(name) + "/" + what
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return rt, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return rt, fmt.Errorf("autoscale: hub %s %s: %w", what, space, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rt, fmt.Errorf("autoscale: hub %s %s: %w", what, space, err)
	}
	if resp.StatusCode != http.StatusOK {
		he := &HubError{Op: what, Space: space, Status: resp.StatusCode, Msg: errorMessage(b)}
		if resp.StatusCode == http.StatusTooManyRequests {
			he.RetryAfter = retryAfter(resp.Header)
			c.mu.Lock()
			if t := c.now().Add(he.RetryAfter); t.After(c.blocked) {
				c.blocked = t
			}
			c.mu.Unlock()
		}
		return rt, he
	}
	if err := json.Unmarshal(b, &rt); err != nil || rt.Stage == "" {
		return rt, fmt.Errorf("autoscale: hub %s %s: unexpected answer (%d bytes)", what, space, len(b))
	}
	return rt, nil
}

// errorMessage is the "error" of a Hub error body, cut short (never the
// request, so never the token).
func errorMessage(b []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		b = []byte(e.Error)
	}
	s := string(b)
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// retryAfter reads Retry-After, else the t= of the RateLimit header, else a
// full window.
func retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	for _, part := range strings.Split(h.Get("RateLimit"), ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			if s, err := strconv.Atoi(v); err == nil && s >= 0 {
				return time.Duration(s) * time.Second
			}
		}
	}
	return HubWindow
}
