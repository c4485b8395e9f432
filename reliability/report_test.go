package reliability_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"
)

const reportPath = "../docs/RELIABILITY.md"

// The region between these markers is written by another suite (the abuse
// tests); a new report keeps it as it was, with a blank line after it.
const (
	keptBegin = "<!-- abuse:begin -->"
	keptEnd   = "<!-- abuse:end -->"
	// The unit-test figures (rows measured by go test in the packages,
	// e.g. issue 36's kills and restarts at the default settings) are
	// written by hand and kept the same way.
	unitBegin = "<!-- unit:begin -->"
	unitEnd   = "<!-- unit:end -->"
)

// keptRegion is the abuse region of the old report, markers included, or
// "" without one (or with a begin marker that is never closed).
func keptRegion(old string) string { return markedRegion(old, keptBegin, keptEnd) }

// markedRegion is the region of old between begin and end, markers
// included, with a blank line after it; "" without a closed one.
func markedRegion(old, begin, end string) string {
	i := strings.Index(old, begin)
	if i < 0 {
		return ""
	}
	j := strings.Index(old[i:], end)
	if j < 0 {
		return ""
	}
	return old[i:i+j+len(end)] + "\n\n"
}

// writeReport writes docs/RELIABILITY.md from the rows of this run.
func writeReport() error {
	sc := currentScale()
	reportMu.Lock()
	defer reportMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# Reliability report\n\n")
	fmt.Fprintf(&b, "Written by the fault-injection suite (`GRADIOPOOL_RELIABILITY=long go test ./reliability/`), not by hand. Run: %s UTC, %s scale, %s/%s, %d CPUs, %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04"), sc.name, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(&b, "Set-up: the gateway (`gateway.Open`) over 2 simulated replicas (`gradiotest`, endpoint `work`: 40 ms, cancellable, executions counted per call id), each behind an in-process toxiproxy; %d sessions per replica; %d callers in a loop (3 in 4 through `/v1/predict`, 1 in 4 through `/v1/submit`, half registered users), each call with `X-Gradiopool-Timeout: 2s`. Each fault lasts %v under that load on replica 1, then is healed.\n\n",
		sc.sessions, sc.workers, sc.hold)
	b.WriteString("Columns: calls sent; results; typed JSON errors by code; calls without an HTTP answer (only expected once the gateway stopped); untyped answers (an empty 200, a cut stream: must be 0); late calls (ended more than 1.5 s after their deadline: must be 0); calls run twice (the simulator's per-id execution counts: must be 0); sessions in use or waiting once the load stopped (must be 0); goroutines before the cell's gateway started and after it closed (must come back); time from healing until every replica is ready and 5 calls in a row succeed.\n\n")
	b.WriteString("| cell | fault | sent | results | typed errors | no answer | untyped | late | run twice | in use after | goroutines | recovery | holds |\n")
	b.WriteString("|---|---|--:|--:|---|---|--:|--:|--:|--:|---|---|---|\n")
	for _, r := range report {
		holds := "yes"
		if len(r.problems) > 0 {
			holds = "NO: " + strings.Join(r.problems, "; ")
		}
		sent := fmt.Sprint(r.sent)
		if r.disconnects > 0 {
			sent += fmt.Sprintf(" (%d left on purpose)", r.disconnects)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %d | %d | %d of %d | %d | %d → %d | %s | %s |\n",
			r.cell.name, r.cell.fault, sent, r.results, r.codes, r.transport, r.untyped, r.late, r.twice, r.ran, r.inUseAfter,
			r.goroutinesBefore, r.after, r.recover, holds)
	}
	b.WriteString("\n")
	notes := false
	for _, r := range report {
		if r.note == "" {
			continue
		}
		if !notes {
			b.WriteString("Cell notes:\n\n")
			notes = true
		}
		fmt.Fprintf(&b, "- %s: %s\n", r.cell.name, r.note)
	}
	if notes {
		b.WriteString("\n")
	}
	b.WriteString(soakSection())
	b.WriteString(fuzzSection())
	old, err := os.ReadFile(reportPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	b.WriteString(keptRegion(string(old)))
	b.WriteString(markedRegion(string(old), unitBegin, unitEnd))
	b.WriteString(limitsSection)
	if err := os.WriteFile(reportPath, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote docs/RELIABILITY.md")
	return nil
}

const limitsSection = `## Not covered, and known limits

- Space building / paused / runtime error: these are Hub stages that matter when a replica is resolved or reconnected through the Hub; the matrix addresses replicas by URL. The 503 a sleeping or crashed Space answers on every route is the "Space asleep" cell.
- Redis down: the cell runs two gateways in one cluster (cluster.redis_url on a real redis-server) and the other cells one gateway with the in-memory assignment store. The cluster runs at the default lease TTL (15 s). While Redis is lost, a gateway keeps to the leases Redis counted for it at the loss (those of its calls and those it kept idle for its next calls) until they may lapse, one lease TTL after their last refresh, and then to its local share; a gateway that held more than its share keeps those calls until they end (a documented limit of pool/cluster). So each gateway's peak is reported, the replica's checked against the limit, measured from 200 ms after every gateway noticed; the longest stretch without a completed call is measured from the fault to the heal and bounded by 4 s (the 2 s detection time plus a margin for the shared machine). A gateway's local share divides the limit by the gateways it saw alive at its last heartbeat (every lease_ttl/3): one that loses Redis within that time after another gateway joined counts only itself and takes the whole limit as its share (the cell measured 3 calls on a replica against a share of 2 until it waited for every gateway to see the other before the outage). Without redis-server installed the cell is not run (its row says so).
- Opt-in cells: the keep-alive race scales uvicorn's 5 s down to 500 ms (the gateway's upstream keep-alive at 4/5 of it, as by default). The "dead gateway" is in-process and cannot be SIGKILLed: its link to Redis is cut (no release, no heartbeat), the load stops sending it calls and on_redis_loss fail_closed keeps it from running any; that it is first in the queues at that moment is likely under the contention (2 sessions per replica, 3 gateways) but not checked. The freeze cell counts calls sent to the frozen replica after it was marked suspect from its calls counter, which also counts callers that were already waiting for one of its sessions.
- The matrix injects each fault on one of two replicas; both replicas failing at once ends calls with typed errors (all_replicas_failed, queue_full) and is covered by the unit tests of pool and gateway, not measured here.
`
