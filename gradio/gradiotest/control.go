package gradiotest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Duration is a time.Duration in JSON: a Go duration string ("250ms") or a
// number of seconds.
type Duration time.Duration

// MarshalJSON writes the duration as a string such as "1.5s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts "250ms" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case string:
		p, err := time.ParseDuration(x)
		if err != nil {
			return err
		}
		*d = Duration(p)
	case float64:
		*d = Duration(x * float64(time.Second))
	default:
		return fmt.Errorf("gradiotest: bad duration %s", b)
	}
	return nil
}

// KnobsJSON is the JSON form of Knobs used by /_sim/state and /_sim/faults.
// In a POST every field is optional: absent fields are left unchanged.
type KnobsJSON struct {
	ConnectCost             *Duration `json:"connect_cost,omitempty"`
	ConnectJitter           *Duration `json:"connect_jitter,omitempty"`
	Latency                 *Duration `json:"latency,omitempty"`
	StepDelay               *Duration `json:"step_delay,omitempty"`
	TimeScale               *float64  `json:"time_scale,omitempty"`
	HeartbeatInterval       *Duration `json:"heartbeat_interval,omitempty"`
	MaxQueueSize            *int      `json:"max_queue_size,omitempty"`
	DefaultConcurrencyLimit *int      `json:"default_concurrency_limit,omitempty"`
	MaxFileSize             *int64    `json:"max_file_size,omitempty"`
	StateTTL                *Duration `json:"state_ttl,omitempty"`
	FaultStatus             *int      `json:"fault_status,omitempty"`
	FailConfig              *int      `json:"fail_config,omitempty"`
	FailJoin                *int      `json:"fail_join,omitempty"`
	CutStream               *int      `json:"cut_stream,omitempty"`
	Stall                   *bool     `json:"stall,omitempty"`
	SlowBody                *Duration `json:"slow_body,omitempty"`
	QueueFull               *bool     `json:"queue_full,omitempty"`
	Asleep                  *bool     `json:"asleep,omitempty"`
}

func knobsToJSON(k Knobs) KnobsJSON {
	d := func(v time.Duration) *Duration { x := Duration(v); return &x }
	return KnobsJSON{d(k.ConnectCost), d(k.ConnectJitter), d(k.Latency), d(k.StepDelay), &k.TimeScale, d(k.HeartbeatInterval),
		&k.MaxQueueSize, &k.DefaultConcurrencyLimit, &k.MaxFileSize, d(k.StateTTL), &k.FaultStatus, &k.FailConfig, &k.FailJoin,
		&k.CutStream, &k.Stall, d(k.SlowBody), &k.QueueFull, &k.Asleep}
}

// Apply sets the present fields on k.
func (j KnobsJSON) Apply(k *Knobs) {
	setD := func(dst *time.Duration, v *Duration) {
		if v != nil {
			*dst = time.Duration(*v)
		}
	}
	setD(&k.ConnectCost, j.ConnectCost)
	setD(&k.ConnectJitter, j.ConnectJitter)
	setD(&k.Latency, j.Latency)
	setD(&k.StepDelay, j.StepDelay)
	setD(&k.HeartbeatInterval, j.HeartbeatInterval)
	setD(&k.SlowBody, j.SlowBody)
	setD(&k.StateTTL, j.StateTTL)
	if j.TimeScale != nil {
		k.TimeScale = *j.TimeScale
	}
	for _, p := range []struct {
		dst *int
		v   *int
	}{{&k.MaxQueueSize, j.MaxQueueSize}, {&k.DefaultConcurrencyLimit, j.DefaultConcurrencyLimit},
		{&k.FaultStatus, j.FaultStatus}, {&k.FailConfig, j.FailConfig}, {&k.FailJoin, j.FailJoin}, {&k.CutStream, j.CutStream}} {
		if p.v != nil {
			*p.dst = *p.v
		}
	}
	if j.MaxFileSize != nil {
		k.MaxFileSize = *j.MaxFileSize
	}
	for _, p := range []struct {
		dst *bool
		v   *bool
	}{{&k.Stall, j.Stall}, {&k.QueueFull, j.QueueFull}, {&k.Asleep, j.Asleep}} {
		if p.v != nil {
			*p.dst = *p.v
		}
	}
}

// Snapshot is the state served by GET /_sim/state.
type Snapshot struct {
	Mode       Mode           `json:"mode"`
	Version    string         `json:"version"`
	Protocol   string         `json:"protocol"`
	APIPrefix  string         `json:"api_prefix"`
	AppID      uint64         `json:"app_id"`
	URL        string         `json:"url"`
	Knobs      KnobsJSON      `json:"knobs"`
	Executions map[string]int `json:"executions"`
	Requests   map[string]int `json:"requests"`
	Queued     int            `json:"queued"`
	Running    int            `json:"running"`
	Sessions   int            `json:"sessions"`
}

// Snapshot returns the server's current state.
func (s *Server) Snapshot() Snapshot {
	s.mu.Lock()
	st := Snapshot{Mode: s.Mode, Version: s.Mode.Version(), Protocol: s.Mode.Protocol(), APIPrefix: s.Mode.APIPrefix(),
		AppID: s.appID, URL: s.URL, Knobs: knobsToJSON(s.knobs), Queued: s.queueSizeLocked(), Sessions: len(s.sessions)}
	for _, g := range s.groups {
		st.Running += g.running
	}
	s.mu.Unlock()
	st.Executions = s.execs.snapshot()
	st.Requests = s.reqs.snapshot()
	return st
}

// serveControl serves the /_sim/ control routes.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	route := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/_sim/"), "/")
	get, post := r.Method == http.MethodGet, r.Method == http.MethodPost
	switch {
	case route == "state" && get:
		writeJSON(w, 200, s.Snapshot())
	case route == "executions" && get:
		writeJSON(w, 200, s.execs.snapshot())
	case route == "requests" && get:
		writeJSON(w, 200, s.reqs.snapshot())
	case (route == "faults" || route == "knobs") && post:
		var j KnobsJSON
		raw, _ := readAllLimit(r, 1<<20)
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			detail(w, 400, "bad knobs: "+err.Error())
			return
		}
		s.UpdateKnobs(j.Apply)
		writeJSON(w, 200, s.Snapshot())
	case route == "reset" && post:
		s.ResetFaults()
		writeJSON(w, 200, s.Snapshot())
	case route == "sleep" && post:
		var body struct {
			WakeAfter Duration `json:"wake_after"`
		}
		raw, _ := readAllLimit(r, 1<<20)
		if len(strings.TrimSpace(string(raw))) > 0 {
			if err := json.Unmarshal(raw, &body); err != nil {
				detail(w, 400, "bad body: "+err.Error())
				return
			}
		}
		s.Sleep(time.Duration(body.WakeAfter))
		writeJSON(w, 200, s.Snapshot())
	case route == "wake" && post:
		s.Wake()
		writeJSON(w, 200, s.Snapshot())
	case route == "restart" && post:
		s.Restart()
		writeJSON(w, 200, s.Snapshot())
	default:
		notFound(w)
	}
}
