package autoscale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shared makes the controllers of several gateways one decision (issue 34
// item 4): every gateway publishes its demand and reads the cluster's, one
// gateway holds a lease and acts, and the others mirror the state it
// saves (which replicas are parked, waking, their measured wake times and
// flap budgets), so that any of them can take over when it dies.
type Shared interface {
	// Sync renews (or takes) the lease, publishes this gateway's demand
	// and reads the cluster's, the saved state, the holds and the log.
	Sync(ctx context.Context, local GatewayDemand) (SyncResult, error)
	// Save stores the acting controller's state and appends its new
	// actions to the log, fenced by the lease's token: ErrFenced when
	// another gateway has taken the lease since.
	Save(ctx context.Context, token int64, state map[string]SharedReplica, actions []Action) error
	// Acting reports whether the lease taken at the last Sync is still
	// surely this gateway's (by this process' own clock).
	Acting() bool
	// SetHold records an operator's hold for every gateway.
	SetHold(ctx context.Context, replica string, h Hold, until time.Time) error
	// Release gives the lease up (a gateway that closes cleanly).
	Release(ctx context.Context) error
}

// ErrFenced: a write of a controller whose lease another gateway has
// taken since.
var ErrFenced = errors.New("autoscale: the lease was taken by another gateway")

// GatewayDemand is one gateway's demand as it publishes it.
type GatewayDemand struct {
	Replicas map[string]Load `json:"replicas"`
	// Waiting are the callers waiting that no replica's Load counts.
	Waiting int `json:"waiting"`
}

// SyncResult is what Sync read.
type SyncResult struct {
	// Token is the lease's fencing token while this gateway holds it, 0
	// when another gateway (Holder) does.
	Token  int64
	Holder string
	// Demand is every live gateway's published demand, by gateway id.
	Demand map[string]GatewayDemand
	State  map[string]SharedReplica
	Holds  map[string]SharedHold
	// Log is the shared action log, oldest first.
	Log []Action
}

// SharedHold is an operator's hold as Redis keeps it.
type SharedHold struct {
	Hold  Hold      `json:"hold"`
	Until time.Time `json:"until"`
}

// SharedReplica is what the acting controller knows of a replica, saved
// for the others.
type SharedReplica struct {
	Stage      string          `json:"stage"`
	StageAt    time.Time       `json:"stageAt"`
	Known      bool            `json:"known"`
	LastNeeded time.Time       `json:"lastNeeded"`
	AwakeSince time.Time       `json:"awakeSince"`
	Draining   bool            `json:"draining,omitempty"`
	DrainSince time.Time       `json:"drainSince"`
	Parked     bool            `json:"parked,omitempty"`
	SleepSet   bool            `json:"sleepSet,omitempty"`
	WakeSent   time.Time       `json:"wakeSent"`
	WakeTimes  []time.Duration `json:"wakeTimes,omitempty"`
	Actions    []time.Time     `json:"actions,omitempty"`
	Disabled   string          `json:"disabled,omitempty"`
	DryParked  bool            `json:"dryParked,omitempty"`
	DryParkAt  time.Time       `json:"dryParkAt"`
	DrySaved   time.Duration   `json:"drySaved,omitempty"`
	AwakeTotal time.Duration   `json:"awakeTotal,omitempty"`
}

// logKeep is how many actions the shared log keeps.
const logKeep = 200

// RedisShared is Shared in a Redis (a cluster's): the lease is one key
// holding "gateway|token", taken with a new token from a counter when it
// is free and renewed by its holder; it lives TTL without a renewal, so a
// dead gateway's lease is free within TTL. Every write of the state and
// log checks the token against the counter (a fencing token): a gateway
// that was frozen past its lease and resumes cannot overwrite its
// successor's state. Its own clock tells it to stop acting TTL*4/5 after
// it sent the renewal, before Redis can give the lease to another.
type RedisShared struct {
	rc     redis.UniversalClient
	id     string
	ttl    time.Duration
	demTTL time.Duration
	prefix string // "{name}:autoscale:"

	mu    sync.Mutex
	token int64
	until time.Time
}

// NewRedisShared returns the Shared of the cluster name for the gateway
// id. ttl is the lease's life without renewal; a gateway's published
// demand lives demandTTL (a few ticks).
func NewRedisShared(rc redis.UniversalClient, name, id string, ttl, demandTTL time.Duration) *RedisShared {
	return &RedisShared{rc: rc, id: id, ttl: ttl, demTTL: demandTTL, prefix: "{" + name + "}:autoscale:"}
}

// ID is the gateway's id in the lease.
func (s *RedisShared) ID() string { return s.id }

// holdScript: KEYS lease, fence; ARGV id, ttl ms. Returns {token, holder}:
// token 0 when another holds it.
var holdScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local sep = string.find(v, '|', 1, true)
  local holder = string.sub(v, 1, sep - 1)
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {tonumber(string.sub(v, sep + 1)), holder}
  end
  return {0, holder}
end
local tok = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. tok, 'PX', ARGV[2])
return {tok, ARGV[1]}
`)

// demandScript: KEYS demand hash; ARGV id, ttl ms, json. Stores this
// gateway's demand with its expiry in Redis' own time, drops the expired
// ones and returns the rest.
var demandScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], (now + tonumber(ARGV[2])) .. '|' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 10)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sep = string.find(v, '|', 1, true)
  if tonumber(string.sub(v, 1, sep - 1)) < now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    table.insert(out, all[i])
    table.insert(out, string.sub(v, sep + 1))
  end
end
return out
`)

// saveScript: KEYS fence, state hash, log; ARGV token, log keep, then
// field/value pairs of the state, then "|", then the log entries.
var saveScript = redis.NewScript(`
if tonumber(redis.call('GET', KEYS[1]) or '0') ~= tonumber(ARGV[1]) then
  return 0
end
local i = 3
while ARGV[i] ~= '|' do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for j = i + 1, #ARGV do
  redis.call('RPUSH', KEYS[3], ARGV[j])
end
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[2]), -1)
return 1
`)

// releaseScript: KEYS lease; ARGV id.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '|' then
  redis.call('DEL', KEYS[1])
end
return 0
`)

func (s *RedisShared) key(k string) string { return s.prefix + k }

// Sync implements Shared.
func (s *RedisShared) Sync(ctx context.Context, local GatewayDemand) (SyncResult, error) {
	dem, err := json.Marshal(local)
	if err != nil {
		return SyncResult{}, err
	}
	sent := time.Now()
	var hold *redis.Cmd
	var demand *redis.Cmd
	var state, holds *redis.MapStringStringCmd
	var log *redis.StringSliceCmd
	_, err = s.rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		hold = holdScript.Eval(ctx, p, []string{s.key("lease"), s.key("fence")}, s.id, s.ttl.Milliseconds())
		demand = demandScript.Eval(ctx, p, []string{s.key("demand")}, s.id, s.demTTL.Milliseconds(), string(dem))
		state = p.HGetAll(ctx, s.key("state"))
		holds = p.HGetAll(ctx, s.key("holds"))
		log = p.LRange(ctx, s.key("log"), 0, -1)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err == nil {
		err = hold.Err()
	}
	if err != nil {
		s.mu.Lock()
		s.token, s.until = 0, time.Time{}
		s.mu.Unlock()
		return SyncResult{}, fmt.Errorf("autoscale: shared state: %w", err)
	}
	var res SyncResult
	hv, _ := hold.Slice()
	if len(hv) == 2 {
		res.Token, _ = hv[0].(int64)
		res.Holder, _ = hv[1].(string)
	}
	s.mu.Lock()
	if res.Token > 0 {
		s.token, s.until = res.Token, sent.Add(s.ttl*4/5)
	} else {
		s.token, s.until = 0, time.Time{}
	}
	s.mu.Unlock()
	res.Demand = map[string]GatewayDemand{}
	if dv, err := demand.Slice(); err == nil {
		for i := 0; i+1 < len(dv); i += 2 {
			id, _ := dv[i].(string)
			js, _ := dv[i+1].(string)
			var d GatewayDemand
			if json.Unmarshal([]byte(js), &d) == nil {
				res.Demand[id] = d
			}
		}
	}
	res.State = map[string]SharedReplica{}
	for name, js := range state.Val() {
		var r SharedReplica
		if json.Unmarshal([]byte(js), &r) == nil {
			res.State[name] = r
		}
	}
	res.Holds = map[string]SharedHold{}
	for name, js := range holds.Val() {
		var h SharedHold
		if json.Unmarshal([]byte(js), &h) == nil {
			res.Holds[name] = h
		}
	}
	for _, js := range log.Val() {
		var a Action
		if json.Unmarshal([]byte(js), &a) == nil {
			res.Log = append(res.Log, a)
		}
	}
	return res, nil
}

// Save implements Shared.
func (s *RedisShared) Save(ctx context.Context, token int64, state map[string]SharedReplica, actions []Action) error {
	args := []any{token, logKeep}
	for name, r := range state {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		args = append(args, name, string(b))
	}
	args = append(args, "|")
	for _, a := range actions {
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		args = append(args, string(b))
	}
	n, err := saveScript.Run(ctx, s.rc, []string{s.key("fence"), s.key("state"), s.key("log")}, args...).Int()
	if err != nil {
		return fmt.Errorf("autoscale: shared state: %w", err)
	}
	if n == 0 {
		s.mu.Lock()
		if s.token == token {
			s.token, s.until = 0, time.Time{}
		}
		s.mu.Unlock()
		return ErrFenced
	}
	return nil
}

// Acting implements Shared.
func (s *RedisShared) Acting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token > 0 && time.Now().Before(s.until)
}

// SetHold implements Shared.
func (s *RedisShared) SetHold(ctx context.Context, replica string, h Hold, until time.Time) error {
	var err error
	if h == HoldAuto {
		err = s.rc.HDel(ctx, s.key("holds"), replica).Err()
	} else {
		b, _ := json.Marshal(SharedHold{Hold: h, Until: until})
		err = s.rc.HSet(ctx, s.key("holds"), replica, string(b)).Err()
	}
	if err != nil {
		return fmt.Errorf("autoscale: shared hold: %w", err)
	}
	return nil
}

// Release implements Shared.
func (s *RedisShared) Release(ctx context.Context) error {
	s.mu.Lock()
	s.token, s.until = 0, time.Time{}
	s.mu.Unlock()
	return releaseScript.Run(ctx, s.rc, []string{s.key("lease")}, s.id).Err()
}
