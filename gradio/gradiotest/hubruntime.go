package gradiotest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"
)

// More stages of huggingface_hub's SpaceStage (the list in _space_api.py).
const (
	StageRunningBuilding    = "RUNNING_BUILDING"
	StageRunningAppStarting = "RUNNING_APP_STARTING"
	StageDeleting           = "DELETING"
)

// Defaults of the Space runtime knobs (Hub.SetStartTimes): short, so that
// tests and the sim wake at once; a benchmark sets real-sized ones.
const (
	DefaultHubBuildTime = 100 * time.Millisecond
	DefaultHubStartTime = 100 * time.Millisecond
	// HubRateWindow is the Hub API's rate-limit window.
	HubRateWindow = 5 * time.Minute
)

// DefaultHardwarePrices are hourly prices in US dollars of some Space
// hardware flavors (the Spaces pricing page, approximate); Hub.SetHardwarePrice
// changes them. Unknown flavors cost nothing.
var DefaultHardwarePrices = map[string]float64{
	"cpu-basic": 0, "cpu-upgrade": 0.03, "t4-small": 0.40, "t4-medium": 0.60,
	"l4x1": 0.80, "l4x4": 3.80, "l40sx1": 1.80, "a10g-small": 1.00,
	"a10g-large": 1.50, "a10g-largex2": 3.00, "a100-large": 2.50,
}

// Bill is a Space's billing meter: seconds billed (while APP_STARTING or
// running; a build, a pause and a sleep are not billed) and their price.
type Bill struct {
	Seconds float64
	Dollars float64
}

// Transition is one stage change of a Space.
type Transition struct {
	At    time.Time
	Stage string
}

// rt is the part of a hubSpace the runtime stage machine keeps. Stages are
// advanced lazily (advanceLocked) from timestamps, never by timers, so an
// injected clock can run a week of Hub time in a moment.
type rt struct {
	managed   bool      // the machine owns the stage (set by a runtime route or a sleep time)
	until     time.Time // end of BUILDING or APP_STARTING
	lastVisit time.Time // last request to the app (for the sleep time)
	gcTimeout int       // seconds idle before STOPPED; -1 never
	hwCurrent string
	hwRequest string
	acctAt    time.Time // billing accounted up to here
	bill      Bill
	log       []Transition
}

// SetClock makes the Hub's runtime machine, billing and rate limit read
// now instead of time.Now (a benchmark runs a week fast). Set it before
// adding Spaces.
func (h *Hub) SetClock(now func() time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = now
}

// SetStartTimes sets the median durations of BUILDING (after a restart)
// and APP_STARTING (after a build, or a visit to a STOPPED Space).
func (h *Hub) SetStartTimes(build, start time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buildTime, h.startTime = build, start
}

// SetStartSpread makes each build and start last its median times
// exp(sigma·N(0,1)) (a lognormal spread; 0 turns it off), drawn from a
// generator seeded with seed so that runs repeat.
func (h *Hub) SetStartSpread(sigma float64, seed uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spread = sigma
	h.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// SetOwnerToken sets the token of the Spaces' owner: the runtime routes
// that change a Space (pause, restart, sleeptime, hardware) answer 401
// without a bearer token and 403 with another. Empty (the default): any
// bearer token is the owner's.
func (h *Hub) SetOwnerToken(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ownerToken = token
}

// SetRateLimit sets how many Hub API calls one token (or, without one, one
// client address) may make per HubRateWindow; past it the Hub answers 429
// with RateLimit headers. 0 (the default): unlimited.
func (h *Hub) SetRateLimit(calls int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rateBudget = calls
}

// SetLookupWakes sets whether a Hub look-up of a STOPPED Space (GET
// /api/spaces/{id} or /runtime) wakes it like a visit to its app does.
// Unverified on the real Hub, so off by default.
func (h *Hub) SetLookupWakes(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lookupWakes = on
}

// SetHardware sets a Space's current and requested hardware flavor (the
// default is cpu-basic).
func (h *Hub) SetHardware(id, flavor string) {
	defer h.flushRestarts() // after the unlock below: deferred calls run last-in first-out
	h.mu.Lock()
	defer h.mu.Unlock()
	if sp := h.spaces[id]; sp != nil {
		h.advanceLocked(sp)
		sp.rt.hwCurrent, sp.rt.hwRequest = flavor, flavor
	}
}

// SetHardwarePrice sets the hourly price of a hardware flavor.
func (h *Hub) SetHardwarePrice(flavor string, perHour float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prices == nil {
		h.prices = map[string]float64{}
	}
	h.prices[flavor] = perHour
}

// SetSleepTime sets a Space's sleep time as POST .../sleeptime does
// (seconds idle before STOPPED; -1 never), without a call.
func (h *Hub) SetSleepTime(id string, seconds int) {
	defer h.flushRestarts() // after the unlock below: deferred calls run last-in first-out
	h.mu.Lock()
	defer h.mu.Unlock()
	if sp := h.spaces[id]; sp != nil {
		h.advanceLocked(sp)
		sp.rt.managed = true
		sp.rt.gcTimeout = seconds
	}
}

// Bill reads a Space's billing meter up to now.
func (h *Hub) Bill(id string) Bill {
	defer h.flushRestarts() // after the unlock below: deferred calls run last-in first-out
	h.mu.Lock()
	defer h.mu.Unlock()
	sp := h.spaces[id]
	if sp == nil {
		return Bill{}
	}
	h.advanceLocked(sp)
	return sp.rt.bill
}

// Transitions lists a Space's stage changes made by the runtime machine
// (pause, restart, sleep, wake), oldest first.
func (h *Hub) Transitions(id string) []Transition {
	defer h.flushRestarts() // after the unlock below: deferred calls run last-in first-out
	h.mu.Lock()
	defer h.mu.Unlock()
	sp := h.spaces[id]
	if sp == nil {
		return nil
	}
	h.advanceLocked(sp)
	return append([]Transition(nil), sp.rt.log...)
}

// Visit records a request to a Space's app, as its replica does for every
// request it gets: it wakes a STOPPED Space and resets the sleep timer. It
// reports whether the app answers now (the stage is RUNNING).
func (h *Hub) Visit(id string) bool {
	defer h.flushRestarts() // after the unlock below: deferred calls run last-in first-out
	h.mu.Lock()
	defer h.mu.Unlock()
	sp := h.spaces[id]
	if sp == nil {
		return false
	}
	return h.visitLocked(sp)
}

func (h *Hub) nowLocked() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

func (h *Hub) initRT(sp *hubSpace) {
	now := h.nowLocked()
	sp.rt = rt{gcTimeout: -1, hwCurrent: "cpu-basic", hwRequest: "cpu-basic", acctAt: now, lastVisit: now}
}

// draw is one duration around its median d.
func (h *Hub) drawLocked(d time.Duration) time.Duration {
	if h.spread <= 0 || h.rng == nil {
		return d
	}
	return time.Duration(float64(d) * math.Exp(h.spread*h.rng.NormFloat64()))
}

func billed(stage string) bool {
	switch stage {
	case StageAppStarting, StageRunning, StageRunningBuilding, StageRunningAppStarting:
		return true
	}
	return false
}

// answers: the app behind a Space in this stage serves requests.
func answers(stage string) bool {
	switch stage {
	case StageRunning, StageRunningBuilding, StageRunningAppStarting:
		return true
	}
	return false
}

func (h *Hub) accountLocked(sp *hubSpace, to time.Time) {
	if to.Before(sp.rt.acctAt) {
		return
	}
	if billed(sp.stage) {
		s := to.Sub(sp.rt.acctAt).Seconds()
		price, ok := h.prices[sp.rt.hwCurrent]
		if !ok {
			price = DefaultHardwarePrices[sp.rt.hwCurrent]
		}
		sp.rt.bill.Seconds += s
		sp.rt.bill.Dollars += s / 3600 * price
	}
	sp.rt.acctAt = to
}

// setStageLocked moves a managed Space to stage at t (billing up to t).
func (h *Hub) setStageLocked(sp *hubSpace, stage string, t time.Time) {
	h.accountLocked(sp, t)
	wasUp := answers(sp.stage)
	sp.stage = stage
	sp.rt.log = append(sp.rt.log, Transition{At: t, Stage: stage})
	if len(sp.rt.log) > 10000 {
		sp.rt.log = append(sp.rt.log[:0], sp.rt.log[len(sp.rt.log)-5000:]...)
	}
	if wasUp && !answers(stage) && sp.srv != nil {
		h.restarts = append(h.restarts, sp.srv) // the process is gone: sessions and state lost
	}
	if stage == StageRunning {
		sp.rt.hwCurrent = sp.rt.hwRequest
		if sp.rt.lastVisit.Before(t) {
			sp.rt.lastVisit = t // the sleep timer starts when it runs
		}
	}
}

// advanceLocked plays a managed Space's timed stages up to now.
func (h *Hub) advanceLocked(sp *hubSpace) {
	now := h.nowLocked()
	for sp.rt.managed {
		switch {
		case sp.stage == StageBuilding && !now.Before(sp.rt.until):
			at := sp.rt.until
			h.setStageLocked(sp, StageAppStarting, at)
			sp.rt.until = at.Add(h.drawLocked(h.startTime))
			continue
		case sp.stage == StageAppStarting && !now.Before(sp.rt.until):
			h.setStageLocked(sp, StageRunning, sp.rt.until)
			continue
		case sp.stage == StageRunning && sp.rt.gcTimeout > 0:
			if at := sp.rt.lastVisit.Add(time.Duration(sp.rt.gcTimeout) * time.Second); !now.Before(at) {
				h.setStageLocked(sp, StageStopped, at)
				continue
			}
		}
		break
	}
	h.accountLocked(sp, now)
}

// visitLocked is a request to the app: it wakes a STOPPED Space.
func (h *Hub) visitLocked(sp *hubSpace) bool {
	h.advanceLocked(sp)
	now := h.nowLocked()
	if now.After(sp.rt.lastVisit) {
		sp.rt.lastVisit = now
	}
	if sp.rt.managed && sp.stage == StageStopped {
		h.setStageLocked(sp, StageAppStarting, now)
		sp.rt.until = now.Add(h.drawLocked(h.startTime))
	}
	return !sp.rt.managed || answers(sp.stage)
}

// appGate is the Server's gate: whether the app may answer a request now.
// A Server registered under several ids answers only if all let it.
func (h *Hub) appGate(s *Server) bool {
	h.mu.Lock()
	ok := true
	for _, sp := range h.spaces {
		if sp.srv == s && !h.visitLocked(sp) {
			ok = false
		}
	}
	h.mu.Unlock()
	h.flushRestarts()
	return ok
}

// flushRestarts restarts, outside h.mu, the replicas whose Space stopped.
func (h *Hub) flushRestarts() {
	h.mu.Lock()
	rs := h.restarts
	h.restarts = nil
	h.mu.Unlock()
	for _, s := range rs {
		s.Restart()
	}
}

// rateLimit counts one API call of r and reports false (after writing the
// 429) when its caller is past the budget of the current window.
func (h *Hub) rateLimit(w http.ResponseWriter, r *http.Request) bool {
	key := bearer(r)
	if key == "" {
		key, _, _ = net.SplitHostPort(r.RemoteAddr)
		key = "addr:" + key
	}
	h.mu.Lock()
	budget := h.rateBudget
	if budget <= 0 {
		h.mu.Unlock()
		return true
	}
	now := h.nowLocked()
	win := now.Truncate(HubRateWindow)
	if !win.Equal(h.rateWin) {
		h.rateWin, h.rateUsed = win, map[string]int{}
	}
	h.rateUsed[key]++
	used := h.rateUsed[key]
	h.mu.Unlock()
	reset := int(math.Ceil(win.Add(HubRateWindow).Sub(now).Seconds()))
	w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"fixed window";"api";q=%d;w=%d`, budget, int(HubRateWindow.Seconds())))
	w.Header().Set("RateLimit", fmt.Sprintf(`"api";r=%d;t=%d`, max(budget-used, 0), reset))
	if used > budget {
		w.Header().Set("Retry-After", fmt.Sprint(reset))
		writeJSON(w, http.StatusTooManyRequests, obj{{"error", "You have exceeded our API rate limit. Retry later."}})
		return false
	}
	return true
}

func bearer(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(tok)
}

// handleRuntimeAction serves POST /api/spaces/{owner}/{name}/{pause,restart,
// sleeptime,hardware}: each answers the runtime JSON; only the owner may.
func (h *Hub) handleRuntimeAction(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("owner") + "/" + r.PathValue("name")
	what := r.PathValue("what")
	tok := bearer(r)
	h.mu.Lock()
	sp := h.spaces[id]
	owner := h.ownerToken
	h.lookups[id]++
	h.mu.Unlock()
	if tok == "" {
		writeJSON(w, 401, obj{{"error", "Invalid credentials in Authorization header"}})
		return
	}
	if sp == nil {
		writeJSON(w, 404, obj{{"error", "Repository not found"}})
		return
	}
	if owner != "" && tok != owner {
		writeJSON(w, 403, obj{{"error", "You don't have the rights to manage this Space"}})
		return
	}
	var body struct {
		Seconds          *int   `json:"seconds"`
		Flavor           string `json:"flavor"`
		SleepTimeSeconds *int   `json:"sleepTimeSeconds"`
	}
	if what == "sleeptime" || what == "hardware" {
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if err == nil {
			err = json.Unmarshal(b, &body)
		}
		if err != nil {
			writeJSON(w, 400, obj{{"error", "Invalid JSON body"}})
			return
		}
	}
	h.mu.Lock()
	h.advanceLocked(sp)
	now := h.nowLocked()
	status, msg := 200, ""
	switch what {
	case "pause":
		sp.rt.managed = true
		if sp.stage != StagePaused {
			h.setStageLocked(sp, StagePaused, now)
		}
	case "restart":
		// ?factory=true rebuilds from scratch on the real Hub; here both
		// kinds take the same BUILDING then APP_STARTING path.
		sp.rt.managed = true
		h.setStageLocked(sp, StageBuilding, now)
		sp.rt.until = now.Add(h.drawLocked(h.buildTime))
	case "sleeptime":
		switch {
		case body.Seconds == nil:
			status, msg = 400, "seconds is required"
		case *body.Seconds < -1 || *body.Seconds == 0:
			status, msg = 400, "seconds must be -1 (never) or positive"
		default:
			sp.rt.managed = true
			sp.rt.gcTimeout = *body.Seconds
		}
	case "hardware":
		if _, ok := DefaultHardwarePrices[body.Flavor]; !ok && h.prices[body.Flavor] == 0 {
			status, msg = 400, fmt.Sprintf("unknown hardware flavor %q", body.Flavor)
			break
		}
		sp.rt.managed = true
		sp.rt.hwRequest = body.Flavor
		if body.SleepTimeSeconds != nil {
			sp.rt.gcTimeout = *body.SleepTimeSeconds
		}
		h.setStageLocked(sp, StageBuilding, now)
		sp.rt.until = now.Add(h.drawLocked(h.buildTime))
	default:
		status, msg = 404, "Not Found"
	}
	out := h.runtime(sp, sp.stage)
	h.mu.Unlock()
	h.flushRestarts()
	if status != 200 {
		writeJSON(w, status, obj{{"error", msg}})
		return
	}
	writeJSON(w, 200, out)
}

func (s *Server) setHubGate(g func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hubGate = g
}

func (s *Server) hubGateNow() func() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hubGate
}
