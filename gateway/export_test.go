package gateway

import (
	"context"
	"time"
)

// SetClock replaces the gateway's clock (pending-call expiry, durations).
func (g *Gateway) SetClock(now func() time.Time) { g.now = now }

// SetHistory sets the dashboard history's interval and size; call it
// before Serve or RunHistory.
func (g *Gateway) SetHistory(interval time.Duration, points int) {
	g.history.mu.Lock()
	defer g.history.mu.Unlock()
	g.history.interval = interval
	g.history.points = make([]HistoryPoint, points)
	g.history.next, g.history.full = 0, false
}

// SetLifePoints sets the capacity of the since-start series; call it
// before Serve or RunHistory.
func (g *Gateway) SetLifePoints(n int) {
	g.history.mu.Lock()
	defer g.history.mu.Unlock()
	g.history.lifeCap = n
}

// HistoryDoc is what GET /api/admin/history?window= answers now.
func (g *Gateway) HistoryDoc(window string) HistoryDoc { return g.history.Doc(window, 0) }

// SetBodyTimeout replaces defaultBodyReadTimeout.
func (g *Gateway) SetBodyTimeout(d time.Duration) { g.bodyTimeout = d }

// SetConnTimeouts replaces the header and idle time-outs of Serve.
func (g *Gateway) SetConnTimeouts(header, idle time.Duration) {
	g.headerTimeout, g.keepAliveTimeout = header, idle
}

// PendingCalls is how many /gradio_api/call calls are kept and the bytes
// of their unread output.
func (g *Gateway) PendingCalls() (int, int64) {
	n, _, b := g.calls.Kept()
	return n, b
}

// PendingFinished is how many kept /gradio_api/call calls have ended.
func (g *Gateway) PendingFinished() int {
	_, n, _ := g.calls.Kept()
	return n
}

// SetClusterStats exposes setClusterStats (Open's) to the external tests.
func (g *Gateway) SetClusterStats(stats func(ctx context.Context) any) { g.setClusterStats(stats) }

// Unexported settings and names the external tests check.
const (
	DefaultClusterLeaseTTL      = defaultClusterLeaseTTL
	DefaultClusterName          = defaultClusterName
	DefaultHistoryInterval      = defaultHistoryInterval
	DefaultHistoryPoints        = defaultHistoryPoints
	DefaultLifePoints           = defaultLifePoints
	DefaultMaxClientConnections = defaultMaxClientConnections
	PriorityHeader              = priorityHeader
	AdminCookie                 = adminCookie
	WindowLife                  = windowLife
	WindowRecent                = windowRecent
)

// SampleHistory takes one dashboard point now.
func (g *Gateway) SampleHistory() { g.history.sample(context.Background()) }

// KillAutoscale stops the gateway's autoscale policy without giving its
// cluster lease up, as a dead process would.
func (g *Gateway) KillAutoscale() {
	if g.autoscale != nil {
		g.autoscale.kill()
	}
}

// SetWriteStall replaces defaultWriteStall.
func (g *Gateway) SetWriteStall(d time.Duration) { g.writeStall = d }
