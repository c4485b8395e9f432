package gateway

import (
	"net"

	"golang.org/x/net/netutil"
)

// DefaultMaxClientConnections bounds the client connections the gateway
// holds open at once (max_client_connections).
const DefaultMaxClientConnections = 10000

func init() {
	settings = append(settings,
		setting{"max_client_connections", "GRADIOPOOL_MAX_CLIENT_CONNECTIONS", "max-client-connections",
			"client connections open at once; more wait to be accepted; negative: no limit",
			intSetter(func(c *Config) *int { return &c.MaxClientConnections }), kindInt, DefaultMaxClientConnections},
	)
}

// limitListener applies max_client_connections to ln: past the limit, new
// connections wait in the kernel's accept queue (and are refused once it
// is full) until one of the open ones closes, so that slowloris or a flood
// of idle connections cannot take every file descriptor while the open
// connections are still served. The header and idle time-outs close the
// slow and idle ones, which frees their places.
func (g *Gateway) limitListener(ln net.Listener) net.Listener {
	n := g.cfg.MaxClientConnections
	if n < 0 {
		return ln
	}
	if n == 0 {
		n = DefaultMaxClientConnections
	}
	return netutil.LimitListener(ln, n)
}
