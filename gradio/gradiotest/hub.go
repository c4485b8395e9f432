package gradiotest

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/internal/backoff"
)

// Space stages (huggingface_hub SpaceStage, plus SLEEPING as the JS client
// knows it).
const (
	StageRunning      = "RUNNING"
	StageSleeping     = "SLEEPING"
	StageBuilding     = "BUILDING"
	StagePaused       = "PAUSED"
	StageRuntimeError = "RUNTIME_ERROR"
	StageNoAppFile    = "NO_APP_FILE"
	StageConfigError  = "CONFIG_ERROR"
	StageBuildError   = "BUILD_ERROR"
	StageStopped      = "STOPPED"
	StageAppStarting  = "APP_STARTING"
)

// DefaultHubWakeDelay is how long a SLEEPING Space takes to wake once
// visited, unless changed with Hub.SetWakeDelay.
const DefaultHubWakeDelay = 100 * time.Millisecond

// Hub is a simulated Hugging Face Hub API that maps Space ids to simulated
// replicas. Create it with NewHub; it is safe for concurrent use.
type Hub struct {
	// URL is the Hub's base URL, http://127.0.0.1:port (the client's Hub
	// endpoint instead of the real one).
	URL string

	l   net.Listener
	srv *http.Server
	wg  sync.WaitGroup

	mu          sync.Mutex // guards the fields below
	spaces      map[string]*hubSpace
	wakeDelay   time.Duration
	connectCost time.Duration
	lookups     map[string]int
	timers      []*time.Timer
	closed      bool

	// runtime machine knobs and state (hubruntime.go)
	now         func() time.Time
	buildTime   time.Duration
	startTime   time.Duration
	spread      float64
	rng         *rand.Rand
	ownerToken  string
	rateBudget  int
	rateWin     time.Time
	rateUsed    map[string]int
	lookupWakes bool
	prices      map[string]float64
	restarts    []*Server
}

type hubSpace struct {
	id      string
	srv     *Server // nil for AddSpaceURL spaces
	url     string
	stage   string
	private bool
	token   string
	rt      rt
}

// NewHub starts a Hub on 127.0.0.1:0. It panics if it cannot listen.
func NewHub() *Hub {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("gradiotest: failed to listen on a port: " + err.Error())
	}
	return NewHubListener(l)
}

// NewHubListener starts a Hub on l.
func NewHubListener(l net.Listener) *Hub {
	h := &Hub{URL: "http://" + l.Addr().String(), l: l, spaces: map[string]*hubSpace{},
		wakeDelay: DefaultHubWakeDelay, lookups: map[string]int{},
		buildTime: DefaultHubBuildTime, startTime: DefaultHubStartTime}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/spaces/{owner}/{name}/{what}", h.handleRuntimeAction)
	mux.HandleFunc("GET /api/spaces/{owner}/{name}", h.handleSpace)
	mux.HandleFunc("GET /api/spaces/{owner}/{name}/{what}", h.handleSpace)
	mux.HandleFunc("HEAD /api/spaces/{owner}/{name}/{what}", h.handleSpace)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, obj{{"error", "Not Found"}})
	})
	h.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.rateLimit(w, r) {
			mux.ServeHTTP(w, r)
		}
	}), ReadHeaderTimeout: time.Minute}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		_ = h.srv.Serve(l)
	}()
	return h
}

// Close stops the Hub. It does not close the replicas.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	for _, t := range h.timers {
		t.Stop()
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		_ = h.srv.Close()
	}
	h.wg.Wait()
}

// AddSpace registers a public RUNNING Space id ("owner/name") served by s.
func (h *Hub) AddSpace(id string, s *Server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sp := &hubSpace{id: id, srv: s, url: s.URL, stage: StageRunning}
	h.initRT(sp)
	h.spaces[id] = sp
	s.setHubGate(func() bool { return h.appGate(s) })
}

// AddSpaceURL registers a RUNNING Space whose app is at url (a replica the
// Hub does not control: stages only change what the Hub reports).
func (h *Hub) AddSpaceURL(id, url string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sp := &hubSpace{id: id, url: strings.TrimSuffix(url, "/"), stage: StageRunning}
	h.initRT(sp)
	h.spaces[id] = sp
}

// SetPrivate makes a Space private: the Hub answers 401 unless the request
// carries "Authorization: Bearer <token>", and so does its replica (see
// Server.HFToken), as behind the Hugging Face proxy.
func (h *Hub) SetPrivate(id, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sp := h.spaces[id]; sp != nil {
		sp.private, sp.token = true, token
		if sp.srv != nil {
			sp.srv.SetHFToken(token)
		}
	}
}

// RemoveSpace forgets a Space (later look-ups get 404).
func (h *Hub) RemoveSpace(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.spaces, id)
}

// SetWakeDelay sets how long a SLEEPING Space takes to wake once visited.
func (h *Hub) SetWakeDelay(d time.Duration) {
	h.mu.Lock()
	h.wakeDelay = d
	h.mu.Unlock()
}

// SetConnectCost delays every Hub answer by d (the Hub half of a slow
// connect).
func (h *Hub) SetConnectCost(d time.Duration) {
	h.mu.Lock()
	h.connectCost = d
	h.mu.Unlock()
}

// SetStage changes a Space's runtime stage. SLEEPING puts its replica to
// sleep (503) until a look-up or a visit wakes it after the wake delay, when
// the stage becomes RUNNING again. Other stages except RUNNING keep the
// replica answering 503 until the stage is set back to RUNNING.
func (h *Hub) SetStage(id, stage string) {
	h.mu.Lock()
	sp := h.spaces[id]
	wake := h.wakeDelay
	h.mu.Unlock()
	if sp == nil {
		return
	}
	h.mu.Lock()
	h.advanceLocked(sp)
	sp.rt.managed = false // set by hand: the runtime machine lets go
	sp.stage = stage
	h.mu.Unlock()
	if sp.srv == nil {
		return
	}
	switch stage {
	case StageRunning, "RUNNING_BUILDING":
		sp.srv.Wake()
	case StageSleeping, StageStopped:
		sp.srv.Sleep(max(wake, time.Nanosecond))
	default:
		sp.srv.Sleep(0)
	}
}

// SetStageFor sets stage now and RUNNING after d (a build that finishes).
func (h *Hub) SetStageFor(id, stage string, d time.Duration) {
	h.SetStage(id, stage)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.timers = append(h.timers, time.AfterFunc(d, func() { h.SetStage(id, StageRunning) }))
}

// Stage reports a Space's current stage ("" if unknown).
func (h *Hub) Stage(id string) string {
	defer h.flushRestarts()
	h.mu.Lock()
	sp := h.spaces[id]
	h.mu.Unlock()
	if sp == nil {
		return ""
	}
	return h.stageOf(sp)
}

// Lookups reports how many Hub requests named the Space.
func (h *Hub) Lookups(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lookups[id]
}

// stageOf refreshes a sleeping Space whose replica woke up.
func (h *Hub) stageOf(sp *hubSpace) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advanceLocked(sp)
	if !sp.rt.managed && (sp.stage == StageSleeping || sp.stage == StageStopped) && sp.srv != nil && !sp.srv.Asleep() {
		sp.stage = StageRunning
	}
	return sp.stage
}

func subdomainOf(id string) string {
	r := strings.NewReplacer("/", "-", "_", "-", ".", "-")
	return strings.ToLower(r.Replace(id))
}

// runtime is the runtime JSON (huggingface_hub SpaceRuntime's raw shape);
// the caller holds h.mu. gcTimeout is null for a Space that never sleeps.
func (h *Hub) runtime(sp *hubSpace, stage string) obj {
	var gc any
	if sp.rt.gcTimeout > 0 {
		gc = sp.rt.gcTimeout
	}
	return obj{{"stage", stage}, {"hardware", obj{{"current", sp.rt.hwCurrent}, {"requested", sp.rt.hwRequest}}},
		{"storage", nil}, {"gcTimeout", gc}, {"replicas", obj{{"current", 1}, {"requested", 1}}},
		{"devMode", false}, {"domains", []obj{{{"domain", subdomainOf(sp.id) + ".hf.space"}, {"isCustom", false}, {"stage", "READY"}}}}}
}

func (h *Hub) handleSpace(w http.ResponseWriter, r *http.Request) {
	owner, name, what := r.PathValue("owner"), r.PathValue("name"), r.PathValue("what")
	var sp *hubSpace
	var id string
	h.mu.Lock()
	cost := h.connectCost
	if owner == "by-subdomain" && what == "" {
		for _, s := range h.spaces {
			if subdomainOf(s.id) == name {
				sp, id = s, s.id
			}
		}
	} else {
		id = owner + "/" + name
		sp = h.spaces[id]
	}
	h.lookups[id]++
	var private bool
	var token, url string
	if sp != nil {
		private, token, url = sp.private, sp.token, sp.url
	}
	h.mu.Unlock()
	if cost > 0 && backoff.Sleep(r.Context(), cost) != nil {
		return
	}
	if sp == nil {
		writeJSON(w, 404, obj{{"error", "Repository not found"}})
		return
	}
	if private {
		auth := r.Header.Get("Authorization")
		if auth != "Bearer "+token {
			writeJSON(w, 401, obj{{"error", "Invalid credentials in Authorization header"}})
			return
		}
	}
	if sp.srv != nil {
		sp.srv.poke() // a visit wakes a sleeping Space
	}
	h.mu.Lock()
	if h.lookupWakes && (what == "" || what == "runtime") {
		h.visitLocked(sp)
	}
	h.mu.Unlock()
	h.flushRestarts()
	stage := h.stageOf(sp)
	h.flushRestarts()
	h.mu.Lock()
	rtJSON := h.runtime(sp, stage)
	h.mu.Unlock()
	switch what {
	case "host":
		writeJSON(w, 200, obj{{"subdomain", subdomainOf(sp.id)}, {"host", url}})
	case "":
		writeJSON(w, 200, obj{{"_id", randHex(12)}, {"id", sp.id}, {"author", strings.Split(sp.id, "/")[0]},
			{"private", private}, {"sdk", "gradio"}, {"host", url}, {"subdomain", subdomainOf(sp.id)},
			{"runtime", rtJSON}})
	case "runtime":
		writeJSON(w, 200, rtJSON)
	case "jwt":
		tok := "jwt_" + randHex(16)
		if sp.srv != nil {
			sp.srv.addJWT(tok)
		}
		writeJSON(w, 200, obj{{"token", tok}})
	case "discussions":
		w.WriteHeader(200)
	default:
		writeJSON(w, 404, obj{{"error", "Not Found"}})
	}
}
