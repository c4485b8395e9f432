package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gradiopool/gradiopool/gateway"
)

// TestDashboardAutoscaleInChromium: with autoscale on, the dashboard shows
// each replica's Space stage and the policy's state of it, the cost per
// hour in the summary and a cost chart; a replica held parked shows
// PAUSED and parked, and the cost falls to the one awake Space's price.
// The history API carries the same numbers (the page computes none).
func TestDashboardAutoscaleInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	const token = "dashboard-autoscale-token"
	_, cfg := autoscaleSpaces(t)
	cfg.Secrets.AdminToken = token
	cfg.Autoscale.Interval = 20 * time.Millisecond
	g, err := gateway.Open(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	g.SetHistory(100*time.Millisecond, 100)
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
		<-served
		_ = g.Close(context.Background())
	})

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chrome), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1100))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	poll := func(step, predicate string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#replicas").innerText + " | " + document.querySelector(".summary").innerText`))
			t.Fatalf("%s: waiting for %s: %v\nshown: %s", step, predicate, err, shown)
		}
	}
	for _, a := range []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/admin"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token)} {
		if err := chromedp.Do(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if resp, err := chromedp.RunResponse(ctx, chromedp.Submit(chromedp.CSS("#login"))); err != nil || resp.Status != http.StatusOK {
		t.Fatalf("logging in: %v, %v", resp, err)
	}
	stage := func(n string) string {
		return fmt.Sprintf(`(document.querySelector('article.replica[data-replica=%q] [data-field="stage"]')||{textContent:""}).textContent`, n)
	}
	visible := func(sel string) string {
		return fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.offsetParent !== null; })()`, sel)
	}
	for _, n := range []string{"a", "b"} {
		poll("stage of "+n, stage(n)+`.startsWith("RUNNING · awake")`)
	}
	poll("cost of two awake", `document.querySelector('.summary [data-field="cost_per_hour"]').textContent === "$1.60"`)
	poll("cost shown", visible(`.summary [data-field="cost_per_hour"]`))
	poll("cost chart", visible(`[data-chart="cost_per_hour"]`)+` && document.querySelectorAll('[data-chart="cost_per_hour"] path.series').length === 2`)

	a := do(t, "POST", base+"/api/admin/autoscale/replicas/b", `{"hold":"parked","duration":"1h"}`, "Authorization", "Bearer "+token)
	if a.status != 200 {
		t.Fatalf("hold: %d %s", a.status, a.body)
	}
	poll("b parked", stage("b")+`.startsWith("PAUSED · parked (held parked)") && `+stage("b")+`.endsWith("$0.00/h")`)
	poll("cost of one awake", `document.querySelector('.summary [data-field="cost_per_hour"]').textContent === "$0.80"`)
	poll("card state", `document.querySelector('article.replica[data-replica="b"]').dataset.autoscale === "parked"`)

	h := do(t, "GET", base+"/api/admin/history?window=recent", "", "Authorization", "Bearer "+token)
	var doc struct {
		Points []struct {
			CostPerHour *float64 `json:"cost_per_hour"`
			Replicas    []struct {
				Name, Stage    string
				AutoscaleState string   `json:"autoscale_state"`
				CostPerHour    *float64 `json:"cost_per_hour"`
			}
		}
	}
	if err := json.Unmarshal([]byte(h.body), &doc); err != nil || len(doc.Points) == 0 {
		t.Fatalf("history: %v %.200s", err, h.body)
	}
	last := doc.Points[len(doc.Points)-1]
	if last.CostPerHour == nil || *last.CostPerHour != 0.8 {
		t.Errorf("history cost_per_hour %v", last.CostPerHour)
	}
	for _, r := range last.Replicas {
		if r.Name == "b" && (r.Stage != "PAUSED" || r.AutoscaleState != "parked" || r.CostPerHour == nil || *r.CostPerHour != 0) {
			t.Errorf("history of b: %+v", r)
		}
	}
}
