package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
)

// checkTimeout bounds one replica's connect in `serve --check`: a Space
// that is waking up can take a minute, a CI step should not hang longer.
const checkTimeout = 2 * time.Minute

// replicaCheck is one row of the `serve --check` table.
type replicaCheck struct {
	replica   string
	protocol  string
	version   string
	endpoints int
	took      time.Duration
	err       error
}

// runCheck is `gradiopool serve --check`: the configuration has been parsed
// and validated by the caller; this checks what `serve` checks at start
// (gateway.Preflight: tracing, Redis and its ACL, the TLS files, the upload
// directory; and the listen address), connects once to every replica
// (through the Hub for Space ids, with HF_TOKEN, as the pool would), prints
// one row per replica and fails if anything failed. It opens no pool and
// holds no listener, so it can run in CI next to a running gateway: a
// listen address in use is a warning (on stderr), not a failure.
func runCheck(ctx context.Context, cfg gateway.Config, stdout, stderr io.Writer) error {
	warn := func(msg string) { fmt.Fprintln(stderr, "warning:", msg) }
	var problems []error
	if err := checkListen(cfg.Listen, warn); err != nil {
		problems = append(problems, err)
	}
	if err := gateway.Preflight(ctx, cfg, warn); err != nil {
		problems = append(problems, err)
	}

	pc := cfg.PoolConfig(nil, nil)
	rows := make([]replicaCheck, len(pc.Replicas))
	var wg sync.WaitGroup
	for i, r := range pc.Replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[i] = checkReplica(ctx, r, pc.ClientOptions)
		}()
	}
	wg.Wait()

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tPROTOCOL\tGRADIO\tENDPOINTS\tCONNECT\tERROR")
	failed := 0
	for _, row := range rows {
		errText, eps := "-", "-"
		if row.err != nil {
			failed++
			errText = row.err.Error()
		} else {
			eps = strconv.Itoa(row.endpoints)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", row.replica, dash(row.protocol), dash(row.version), eps,
			row.took.Round(time.Millisecond), errText)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, "FAILED:", p)
	}
	if failed > 0 {
		problems = append(problems, fmt.Errorf("%d of %d replicas failed", failed, len(rows)))
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	fmt.Fprintf(stdout, "configuration valid; %d replicas reachable\n", len(rows))
	return nil
}

// checkListen tries the listen address as serve would and lets it go. An
// address in use is only a warning: --check may run beside the gateway it
// checks for.
func checkListen(addr string, warn func(string)) error {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		warn(fmt.Sprintf("listen: %s is in use now (a gateway running there?); serve would fail to start while it is", addr))
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen: %s: %w", addr, err)
	}
	return ln.Close()
}

// checkReplica connects to one replica once and describes it.
func checkReplica(ctx context.Context, replica string, opts []gradio.Option) replicaCheck {
	row := replicaCheck{replica: replica}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	start := time.Now()
	c, err := gradio.Connect(ctx, replica, opts...)
	row.took = time.Since(start)
	if err != nil {
		row.err = err
		return row
	}
	defer c.Close()
	cfg := c.Config()
	row.protocol, row.version = cfg.Protocol, cfg.Version
	for i := range cfg.Dependencies {
		if cfg.Dependencies[i].Callable() {
			row.endpoints++
		}
	}
	return row
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
