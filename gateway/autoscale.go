package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/autoscale"
	"github.com/gradiopool/gradiopool/pool"

	"github.com/prometheus/client_golang/prometheus"
)

// AutoscaleConfig is the autoscale.* keys: the policy that parks the
// replicas' Spaces when they are not needed and wakes them ahead of demand
// (package autoscale, docs/autoscale.md).
type AutoscaleConfig struct {
	// Mode is off (default), dry_run (decide and log, change nothing) or on.
	Mode string
	// MinAwake replicas are always kept awake; -1: none (0 is the
	// default's zero value).
	MinAwake int
	// ParkAfter: a replica unneeded this long (and at least 3x its wake
	// time) is drained and paused.
	ParkAfter time.Duration
	// MinAwakeAfterWake keeps a woken replica awake at least this long.
	MinAwakeAfterWake time.Duration
	// MaxActionsPerHour and MaxActionsPerDay bound parks and wakes per replica.
	MaxActionsPerHour int
	MaxActionsPerDay  int
	// HubCallBudget is the Hub API calls the policy makes per 5 minutes at most.
	HubCallBudget int
	// Interval is how often the policy runs.
	Interval time.Duration
	// WakeTimeout: a call that finds every replica parked waits this long
	// for a wake, then gets 503 with Retry-After.
	WakeTimeout time.Duration
	// ParkLever is pause (pause the Space) or sleep (set a short sleep
	// time, SleepTime: the Space stops itself once idle that long and
	// wakes on a visit, without a build).
	ParkLever string
	// SleepTime is the sleep time the sleep lever sets.
	SleepTime time.Duration
}

const defaultHubURL = "https://huggingface.co"

func (a AutoscaleConfig) validate(c *Config) []error {
	var errs []error
	bad := func(format string, v ...any) { errs = append(errs, fmt.Errorf(format, v...)) }
	m, err := autoscale.ParseMode(a.Mode)
	if err != nil {
		bad("%v", err)
	}
	if a.MinAwake < -1 {
		bad("autoscale.min_awake: %d, want -1 (none) or more", a.MinAwake)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"autoscale.park_after", a.ParkAfter}, {"autoscale.min_awake_after_wake", a.MinAwakeAfterWake}, {"autoscale.interval", a.Interval},
		{"autoscale.wake_timeout", a.WakeTimeout}} {
		if d.v <= 0 {
			bad("%s: %v, must be positive", d.key, d.v)
		}
	}
	if a.MaxActionsPerHour < 1 || a.MaxActionsPerDay < a.MaxActionsPerHour {
		bad("autoscale.max_actions_per_hour (%d) must be at least 1 and autoscale.max_actions_per_day (%d) at least as large", a.MaxActionsPerHour, a.MaxActionsPerDay)
	}
	if _, err := autoscale.ParseLever(a.ParkLever); err != nil {
		bad("%v", err)
	}
	if a.SleepTime < time.Second {
		bad("autoscale.sleep_time: %v, must be at least 1s", a.SleepTime)
	}
	if a.HubCallBudget < 1 {
		bad("autoscale.hub_call_budget: %d, must be at least 1", a.HubCallBudget)
	}
	if m == autoscale.ModeOn && c.Secrets.HFToken == "" {
		bad("autoscale.mode on needs HF_TOKEN: the Spaces' owner's token with write access")
	}
	return errs
}

// autoscaler is the running policy of a gateway made by Open.
type autoscaler struct {
	ctl    *autoscale.Controller
	shared *autoscale.RedisShared // in a cluster
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startAutoscale starts the policy over p when autoscale.mode is not off.
// Only replicas named by a Space id can be managed (a URL has no Space to
// pause); the others are left alone.
//
// In a cluster (member not nil) one gateway acts: the one holding the
// autoscale lease in the cluster's Redis (autoscale.RedisShared), which
// lives max(cluster.lease_ttl, 3 x autoscale.interval) without renewal;
// the others publish their demand and apply its decisions to their pools.
func startAutoscale(cfg Config, p *pool.Pool, logger *slog.Logger, metrics *Metrics, member *clusterMember) *autoscaler {
	mode, _ := autoscale.ParseMode(cfg.Autoscale.Mode)
	if mode == autoscale.ModeOff {
		return nil
	}
	names := p.Replicas()
	var reps []autoscale.Replica
	for i, src := range cfg.Pool.Replicas {
		if i >= len(names) {
			break
		}
		if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
			logger.Warn("autoscale: replica given by URL is not managed (no Space id)", "replica", names[i])
			continue
		}
		reps = append(reps, autoscale.Replica{Name: names[i], Space: src})
	}
	hubURL := cfg.HubURL
	if hubURL == "" {
		hubURL = defaultHubURL
	}
	minAwake := max(cfg.Autoscale.MinAwake, 0)
	lever, _ := autoscale.ParseLever(cfg.Autoscale.ParkLever) // validated
	client := autoscale.NewHubClient(hubURL, cfg.Secrets.HFToken, cfg.Autoscale.HubCallBudget, nil, nil)
	ctl := autoscale.New(autoscale.Config{
		Mode: mode, MinAwake: &minAwake, ParkAfter: cfg.Autoscale.ParkAfter,
		MinAwakeAfterWake: cfg.Autoscale.MinAwakeAfterWake,
		MaxActionsPerHour: cfg.Autoscale.MaxActionsPerHour, MaxActionsPerDay: cfg.Autoscale.MaxActionsPerDay,
		Lever: lever, SleepTime: cfg.Autoscale.SleepTime,
	}, client, &poolTarget{p: p, max: cfg.Pool.MaxConnections}, reps, logger, nil)
	a := &autoscaler{ctl: ctl}
	if member != nil {
		a.shared = autoscale.NewRedisShared(member.rc, cfg.Cluster.Name, member.coord.ID(),
			max(cfg.Cluster.LeaseTTL, 3*cfg.Autoscale.Interval), 3*cfg.Autoscale.Interval)
		ctl.SetShared(a.shared)
	}
	metrics.register(&autoscaleCollector{ctl: ctl})
	if mode == autoscale.ModeOn {
		p.SetWakeWait(cfg.Autoscale.WakeTimeout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctl.Run(ctx, cfg.Autoscale.Interval)
	}()
	logger.Info("autoscale: started", "mode", string(mode), "replicas", len(reps), "min_awake", minAwake,
		"park_after", cfg.Autoscale.ParkAfter.String())
	return a
}

func (a *autoscaler) close() error {
	a.cancel()
	a.wg.Wait()
	if a.shared != nil {
		// Another gateway takes over at its next tick, not a lease TTL later.
		ctx, cancel := context.WithTimeout(context.Background(), clusterLeaveTimeout)
		defer cancel()
		return a.shared.Release(ctx)
	}
	return nil
}

// kill stops the policy without giving its lease up, as a dead process
// would (tests).
func (a *autoscaler) kill() {
	a.cancel()
	a.wg.Wait()
	a.shared = nil
}

// poolTarget is the pool as the policy sees it.
type poolTarget struct {
	p   *pool.Pool
	max int
}

func (t *poolTarget) Load(replica string) autoscale.Load {
	st := t.p.Stats(context.Background()).Pools[replica]
	return autoscale.Load{InUse: st.InUseConnections, Waiting: st.QueueLength, Capacity: t.max}
}

// Waiting: calls waiting because every replica is parked (those queued on
// a replica are in its Load).
func (t *poolTarget) Waiting() int { return t.p.ParkedWaiters() }

func (t *poolTarget) SetParked(replica string, parked bool) { _ = t.p.SetParked(replica, parked) }

func (t *poolTarget) SetWakeETA(at time.Time) { t.p.SetWakeETA(at) }

// Wake visits the replica's Space: a stopped one wakes (autoscale's sleep lever).
func (t *poolTarget) Wake(replica string) { _ = t.p.Wake(replica) }

// autoscaleRoutes registers GET /api/admin/autoscale and POST
// /api/admin/autoscale/replicas/{name}.
func (g *Gateway) autoscaleRoutes(admin func(string, http.HandlerFunc)) {
	admin("GET /api/admin/autoscale", g.handleAutoscale)
	admin("POST /api/admin/autoscale/replicas/{name}", g.handleAutoscaleHold)
}

func (g *Gateway) handleAutoscale(w http.ResponseWriter, r *http.Request) {
	if g.autoscale == nil {
		writeJSON(w, http.StatusOK, map[string]any{"mode": "off"})
		return
	}
	writeJSON(w, http.StatusOK, g.autoscale.ctl.Status())
}

// handleAutoscaleHold: {"hold": "awake"|"parked"|"auto", "duration": "2h"}.
func (g *Gateway) handleAutoscaleHold(w http.ResponseWriter, r *http.Request) {
	if g.autoscale == nil {
		writeError(w, &apiError{Status: http.StatusConflict, Code: "autoscale_off", Message: "autoscale.mode is off"})
		return
	}
	var body struct {
		Hold     string `json:"hold"`
		Duration string `json:"duration"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "want {\"hold\": \"awake|parked|auto\", \"duration\": \"2h\"}"})
		return
	}
	var d time.Duration
	if body.Duration != "" {
		var err error
		if d, err = time.ParseDuration(body.Duration); err != nil {
			writeError(w, &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: "duration: " + err.Error()})
			return
		}
	}
	if err := g.autoscale.ctl.SetHold(r.PathValue("name"), autoscale.Hold(body.Hold), d); err != nil {
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: err.Error()})
		return
	}
	g.log.Info("autoscale: hold set by an operator", "replica", r.PathValue("name"), "hold", body.Hold, "duration", d.String())
	writeJSON(w, http.StatusOK, g.autoscale.ctl.Status())
}

// autoscaleCollector exports the policy's state at scrape time.
type autoscaleCollector struct{ ctl *autoscale.Controller }

var (
	descAutoscaleStage = prometheus.NewDesc("gradiopool_autoscale_replica_stage",
		"1 for the replica's Space stage and the policy's state of it", []string{"replica", "stage", "state"}, nil)
	descAutoscaleActions = prometheus.NewDesc("gradiopool_autoscale_actions_total",
		"autoscale actions by kind (wake, park, drain, status) and result", []string{"kind", "result"}, nil)
	descAutoscaleAwake = prometheus.NewDesc("gradiopool_autoscale_awake_seconds_total",
		"seconds the policy saw each replica awake: its estimated billed time", []string{"replica"}, nil)
)

func (c *autoscaleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAutoscaleStage
	ch <- descAutoscaleActions
	ch <- descAutoscaleAwake
}

func (c *autoscaleCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.ctl.Status()
	for _, r := range st.Replicas {
		ch <- prometheus.MustNewConstMetric(descAutoscaleStage, prometheus.GaugeValue, 1, r.Name, r.Stage, r.State)
		ch <- prometheus.MustNewConstMetric(descAutoscaleAwake, prometheus.CounterValue, r.AwakeSeconds, r.Name)
	}
	for k, v := range c.ctl.Counts() {
		ch <- prometheus.MustNewConstMetric(descAutoscaleActions, prometheus.CounterValue, float64(v), k[0], k[1])
	}
}
