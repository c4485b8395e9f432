package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
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
// and validated by the caller; this connects once to every replica (through
// the Hub for Space ids, with HF_TOKEN, as the pool would), prints one row
// per replica and fails if any replica could not be reached. It opens no
// listener and no pool, so it can run in CI next to a running gateway.
func runCheck(ctx context.Context, cfg gateway.Config, stdout io.Writer) error {
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
	if failed > 0 {
		return fmt.Errorf("check: %d of %d replicas failed", failed, len(rows))
	}
	fmt.Fprintf(stdout, "configuration valid; %d replicas reachable\n", len(rows))
	return nil
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
