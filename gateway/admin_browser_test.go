package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/version"
	"github.com/gradiopool/gradiopool/pool"
)

// chromiumPath finds a Chromium: GRADIOPOOL_CHROMIUM, else chromium on the
// PATH (the Debian package CI installs). Missing, the test skips, or fails
// when GRADIOPOOL_REQUIRE_CHROMIUM=1 (make test sets it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GRADIOPOOL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("GRADIOPOOL_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium is required (GRADIOPOOL_REQUIRE_CHROMIUM=1) but not installed: apt-get install chromium")
	}
	t.Skip("chromium not installed; set GRADIOPOOL_REQUIRE_CHROMIUM=1 to make this a failure")
	return ""
}

// artifactDir is where the test leaves its screenshot: GRADIOPOOL_ARTIFACTS
// (make test sets it), else a temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("GRADIOPOOL_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestDashboardInChromium drives the dashboard in headless Chromium: a
// wrong token is refused, the right one logs in, every replica appears
// with the version and uptime, the numbers move while a workload runs
// (gr.Errors among its calls: counted as app errors, not as replica
// failures; a refused join: a failover), the endpoint table fills, the
// charts span from the gateway's start and follow the chosen window, a
// killed replica shows as ejected, the events list filters by kind and
// replica with sessions created only counted; the page is saved as a
// screenshot (docs/dashboard.png is a copy of it).
func TestDashboardInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	const token = "dashboard-test-token"

	var sims []*gradiotest.Server
	var urls []string
	for range 3 {
		s := gradiotest.NewUnstartedServer(nil)
		s.DefaultConcurrencyLimit = -1
		s.Latency = 20 * time.Millisecond
		s.Start()
		t.Cleanup(s.Close)
		sims = append(sims, s)
		urls = append(urls, s.URL)
	}
	cfg := gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 2, MaxConnections: 6}}
	cfg.Secrets.AdminToken = token
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(nil, metrics))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, nil, metrics)
	g.SetHistory(250*time.Millisecond, 160) // a 40 s chart: the test's whole run
	g.SetLifePoints(16)                     // merged twice in the first 8 s
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(serveCtx, ln) }()
	t.Cleanup(func() {
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = g.Close(context.Background()) // the front door's sessions
	})
	names := p.Replicas()

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	// The browser lives as long as the context of the first Run: start it
	// on bctx, then bound the steps.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		for i, a := range actions {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := chromedp.Do(sctx, a)
			cancel()
			if err != nil {
				t.Fatalf("%s (step %d): %v", step, i+1, err)
			}
		}
	}
	poll := func(step, predicate string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
			t.Fatalf("%s: waiting for %s: %v", step, predicate, err)
		}
	}
	eval := func(expr string) int {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}

	// A wrong token: the form again, with the refusal, and no dashboard.
	do("wrong token",
		chromedp.Navigate(base+"/admin"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
	)
	if resp, err := chromedp.RunResponse(ctx, chromedp.Submit(chromedp.CSS("#login"))); err != nil || resp.Status != http.StatusForbidden {
		t.Fatalf("submitting a wrong token: %v, %v; want 403", resp, err)
	}
	poll("refusal", `(document.querySelector("#login-error")||{textContent:""}).textContent.includes("not valid")`)
	if n := eval(`document.querySelectorAll("article.replica").length`); n != 0 {
		t.Fatal("a wrong token shows the dashboard")
	}

	// The right token: every replica appears.
	do("log in", chromedp.SendKeys(chromedp.CSS("#token"), token))
	if resp, err := chromedp.RunResponse(ctx, chromedp.Submit(chromedp.CSS("#login"))); err != nil || resp.Status != http.StatusOK {
		t.Fatalf("logging in: %v, %v; want the dashboard", resp, err)
	}
	for _, n := range names {
		poll("replica "+n, fmt.Sprintf(`!!document.querySelector('article.replica[data-replica=%q] [data-field="state"]')?.textContent`, n))
	}
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || strings.Contains(loc, token) {
		t.Fatalf("location %q (%v): the token must not be in the URL", loc, err)
	}

	// Version and uptime.
	poll("version", fmt.Sprintf(`document.querySelector('.summary [data-field="version"]')?.textContent === %q`, version.Get().Version))
	poll("uptime", `/^\d+ (s|min)/.test(document.querySelector('.summary [data-field="uptime"]')?.textContent)`)

	cell := func(endpoint, f string) string {
		return fmt.Sprintf(`(document.querySelector('#endpoints tr[data-endpoint=%q] [data-field=%q]')||{textContent:""}).textContent`, endpoint, f)
	}
	// Calls by the front door (Gradio's own protocol) are in the endpoint
	// table like the others, a gr.Error as an app error.
	upperFn, failFn := fdtest.FnIndex(t, base, "upper"), fdtest.FnIndex(t, base, "fail")
	if got := fdtest.Call(t, base, "dash1", upperFn, "hi"); got != "HI" {
		t.Fatalf("front door upper: %q", got)
	}
	id, err := fdtest.Join(base, "dash1", failFn, "x")
	if err != nil {
		t.Fatal(err)
	}
	if done, err := fdtest.Stream(base, "dash1"); err != nil || done[id] == nil || done[id]["success"] != false {
		t.Fatalf("front door fail: %v %v", done, err)
	}
	fdCells := fmt.Sprintf(`%s === "1" && %s === "0" && %s === "1" && %s === "0"`,
		cell("upper", "calls"), cell("upper", "errors"), cell("fail", "app_errors"), cell("fail", "errors"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](fdCells, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`[%s, %s, %s, %s].join(" ")`,
			cell("upper", "calls"), cell("upper", "errors"), cell("fail", "app_errors"), cell("fail", "errors"))))
		t.Fatalf("front-door calls: the table shows upper calls, errors, fail app errors, errors = %s; the gateway counted %+v (%v)",
			shown, g.HistoryDoc(gateway.WindowRecent).Endpoints, err)
	}

	// A workload: the calls counters move. One call in 8 is to "fail",
	// which raises gr.Error.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; i < 20000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				endpoint := "upper"
				if i%8 == 7 {
					endpoint = "fail"
				}
				req, _ := http.NewRequest("POST", base+"/v1/predict/"+endpoint, strings.NewReader(`{"data":["x"]}`))
				req.Header.Set(gateway.UserHeader, fmt.Sprintf("user%d-%d@example.com", w, i%7))
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	calls := func(n string) string {
		return fmt.Sprintf(`Number((document.querySelector('article.replica[data-replica=%q] [data-field="calls_total"]')||{textContent:""}).textContent.replace(/\D/g,""))`, n)
	}
	for _, n := range names {
		poll("calls on "+n, calls(n)+` > 0`)
	}
	poll("calls per second", `parseFloat(document.querySelector('.summary [data-field="calls_per_second"]')?.textContent) > 0`)
	before := eval(calls(names[0]))
	poll("calls grow", fmt.Sprintf(`%s > %d`, calls(names[0]), before))

	// gr.Error: app errors on the cards and in the endpoint table; the
	// replicas' failures stay at none.
	field := func(n, f string) string {
		return fmt.Sprintf(`(document.querySelector('article.replica[data-replica=%q] [data-field=%q]')||{textContent:""}).textContent`, n, f)
	}
	total := func(n, f string) string { // the "… · N total" of a card field
		return fmt.Sprintf(`Number((%s.match(/([\d,.\s]+) total/)||["","-1"])[1].replace(/\D/g,""))`, field(n, f))
	}
	for _, n := range names {
		poll("app errors on "+n, total(n, "app_errors")+` > 0`)
		if got := eval(total(n, "error_rate")); got != 0 {
			t.Errorf("replica %s shows %d failures; gr.Errors are the app's, not the replica's", n, got)
		}
	}
	poll("endpoint upper", fmt.Sprintf(`Number(%s.replace(/\D/g,"")) > 10 && / ms$/.test(%s) && / ms$/.test(%s)`,
		cell("upper", "calls"), cell("upper", "p50"), cell("upper", "p95")))
	poll("endpoint fail", fmt.Sprintf(`Number(%s.replace(/\D/g,"")) > 0 && %s === "0"`, cell("fail", "app_errors"), cell("fail", "errors")))

	// A refused join: the call fails over, counted on the replica left.
	sims[0].FailNextJoins(2)
	poll("failover", fmt.Sprintf(`Number(%s) > 0`, field(names[0], "failovers_total")))

	// The charts span from the gateway's start (not a fixed hour with
	// the data at its right edge), and follow the chosen window.
	chart := `document.querySelector('[data-chart="calls_per_second"] svg')`
	started := eval(`Number(` + chart + `.dataset.x0)`)
	if doc := g.HistoryDoc(gateway.WindowRecent); int64(started) > doc.StartedUnixMs+1000 || int64(started) < doc.StartedUnixMs {
		t.Errorf("the 1 h chart starts at %d, want the gateway's start %d", started, doc.StartedUnixMs)
	}
	firstX := `Math.round(document.querySelector('[data-chart="calls_per_second"] path.series').getAttribute("d").match(/^M([\d.]+)/)[1])`
	if x := eval(firstX); x > 100 {
		t.Errorf("the first point is drawn at x=%d of 600: the chart does not span from the start", x)
	}
	// Since start: the series merges its points in pairs as it fills; the
	// page fetches it again after each merge, so it draws the server's
	// series, from its first point, each line one run of points in time
	// order (at most the series' 16 and the partial one).
	epoch := g.HistoryDoc(gateway.WindowLife).Epoch
	do("since start", chromedp.Click(chromedp.CSS(`button[data-window="life"]`)))
	poll("life window", chart+`?.dataset.window === "life" && `+chart+`.querySelectorAll("path.series").length >= 3`)
	for i := 0; g.HistoryDoc(gateway.WindowLife).Epoch == epoch; i++ { // a merge while the page shows the series
		if i > 600 {
			t.Fatal("the since-start series never merged")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Right after a merge the series holds half its 16 points; it gains
	// one every 0.5 s until the next merge. A page that kept its old points
	// would draw 16 or 17.
	life := g.HistoryDoc(gateway.WindowLife)
	poll("life merged", fmt.Sprintf(`Number(%s.dataset.first) === %d && Number(%s.dataset.resolution) === %v &&
		[...%s.querySelectorAll("path.series")].every((p) => p.getAttribute("d").split(/[ML]/).length-1 <= 12)`,
		chart, life.Points[0].UnixMs, chart, life.ResolutionSeconds, chart))
	// From the start: the axis begins at the gateway's start, and each
	// line at the series' first point, where the axis puts its time. (A
	// fixed x bound would depend on how many points the page holds: the
	// first point of a merged series lies a whole bucket after the start.)
	if x0 := eval(`Number(` + chart + `.dataset.x0) - ` + fmt.Sprint(life.StartedUnixMs)); x0 != 0 {
		t.Errorf("the since-start chart's axis begins %d ms after the gateway's start", x0)
	}
	if bad := eval(`(() => { const svg = ` + chart + `, x0 = Number(svg.dataset.x0), x1 = Number(svg.dataset.x1);
		const first = 44 + (600 - 44 - 8) * (Number(svg.dataset.first) - x0) / (x1 - x0);
		return [...svg.querySelectorAll("path.series")].filter((p) => {
			const xs = [...p.getAttribute("d").matchAll(/[ML]([\d.]+) /g)].map((m) => Number(m[1]));
			return xs.length > 17 || xs.some((x, i) => i > 0 && x <= xs[i-1]) || Math.abs(xs[0] - first) > 1;
		}).length; })()`); bad != 0 {
		paths, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...`+chart+`.querySelectorAll("path.series")].map((p) => p.getAttribute("d")).join("\n")`))
		t.Errorf("%d lines of the since-start chart are not one ordered run of at most 17 points from the start (series epoch %d, first %d):\n%s",
			bad, life.Epoch, life.Points[0].UnixMs, paths)
	}
	do("5 min", chromedp.Click(chromedp.CSS(`button[data-window="300"]`)))
	poll("5 min window", chart+`?.dataset.window === "300" && `+chart+`.querySelectorAll("path.series").length >= 3`)

	// Kill a replica: its card says so, the events list the ejection.
	sims[1].Close()
	killed := names[1]
	poll("ejected", fmt.Sprintf(`document.querySelector('article.replica[data-replica=%q]')?.dataset.state === "ejected"`, killed))
	poll("event", `!!document.querySelector('#events tr[data-kind="ejected"]')`)
	poll("ejections", fmt.Sprintf(`Number(%s) > 0`, field(killed, "ejections_total")))
	poll("charts", `document.querySelectorAll('[data-chart="calls_per_second"] path.series').length >= 2`)
	// Its sessions are not "healthy": held, not serving; its error is
	// shown with its time. The survivors' cards show no error.
	poll("not serving", fmt.Sprintf(`%s.includes("not serving (ejected)") && /^since .+: /.test(%s)`, field(killed, "health"), field(killed, "last_error")))
	for _, n := range []string{names[0], names[2]} {
		if got := eval(fmt.Sprintf(`%s.length + (%s.includes("healthy") ? 0 : 1000)`, field(n, "last_error"), field(n, "health"))); got != 0 {
			t.Errorf("serving replica %s: an error or no health shown (%d)", n, got)
		}
	}

	// The operator's buttons: drain a replica, see it held and the action
	// in the events, enable it again. A reload is an event too.
	held := names[2]
	button := func(action string) string {
		return fmt.Sprintf(`article.replica[data-replica=%q] button[data-action=%q]`, held, action)
	}
	do("drain", chromedp.Click(chromedp.CSS(button("drain"))))
	poll("drained", fmt.Sprintf(`["draining", "drained"].includes(document.querySelector('article.replica[data-replica=%q]')?.dataset.operator) &&
		document.querySelector(%q).disabled && !document.querySelector(%q).disabled`, held, button("drain"), button("enable")))
	if got := p.Controls()[held]; got != pool.ControlDrain {
		t.Fatalf("after the drain button the pool holds %s as %q", held, got)
	}
	poll("drained: not serving", fmt.Sprintf(`%s.includes("not serving (drain")`, field(held, "health")))
	poll("summary", `document.querySelector('.summary [data-field="status"]')?.textContent === "1 of 3 replicas ready · 1 held by an operator"`)
	poll("control event", fmt.Sprintf(`!!document.querySelector('#events tr[data-kind="control"][data-replica=%q]')`, held))
	do("enable", chromedp.Click(chromedp.CSS(button("enable"))))
	poll("enabled", fmt.Sprintf(`document.querySelector('article.replica[data-replica=%q]')?.dataset.operator === "enabled"`, held))
	g.SetConfigLoader(func() (gateway.Config, error) { return cfg, nil })
	if _, err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	poll("reload event", `!!document.querySelector('#events tr[data-kind="reload"]')`)

	// Sessions created are counted, not listed one row each.
	poll("sessions counted", `Number(document.querySelector('#event-counts li[data-kind="session_created"]')?.dataset.count) >= 3`)
	if n := eval(`document.querySelectorAll('#events tr[data-kind="session_created"]').length`); n != 0 {
		t.Errorf("%d session_created rows in the events list, want them only counted", n)
	}
	for _, n := range names {
		poll("sessions created on "+n, fmt.Sprintf(`Number(%s) > 0`, field(n, "sessions_created")))
	}
	// The filters: by kind, then by replica too.
	choose := func(sel, value string) {
		t.Helper()
		do("filter "+sel, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
			`(() => { const s = document.querySelector(%q); s.value = %q; s.dispatchEvent(new Event("change")); })()`, sel, value)))
	}
	choose("#filter-kind", "failover")
	poll("failover rows", `(() => { const rows = [...document.querySelectorAll("#events tr")];
		return rows.length > 0 && rows.every((r) => r.dataset.kind === "failover"); })()`)
	choose("#filter-kind", "ejected")
	choose("#filter-replica", killed)
	poll("filtered rows", fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll("#events tr")];
		return rows.length > 0 && rows.every((r) => r.dataset.kind === "ejected" && r.dataset.replica === %q); })()`, killed))
	choose("#filter-replica", names[2])
	poll("no rows", `document.querySelectorAll("#events tr").length === 0 && document.querySelectorAll("#event-counts li").length === 0`)
	choose("#filter-kind", "")
	choose("#filter-replica", "")
	do("1 h", chromedp.Click(chromedp.CSS(`button[data-window="3600"]`)))
	// The survivors keep serving, and the numbers keep moving.
	before = eval(calls(names[0]))
	poll("calls after the kill", fmt.Sprintf(`%s > %d`, calls(names[0]), before+100))
	poll("two ready", `document.querySelector('.summary [data-field="status"]')?.textContent.startsWith("2 of 3")`)

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // PNG
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(artifactDir(t), "dashboard.png")
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(shot))
}
