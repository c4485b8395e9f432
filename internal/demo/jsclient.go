package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// jsClientTimeout bounds the JS client step (a hang guard: it takes well
// under a second on the simulated replicas).
const jsClientTimeout = time.Minute

// jsUser is the registered user the JS client names in X-Gradiopool-User.
const jsUser = "jsclient@example.com"

// jsStateCalls is how many gr.State calls the JS client makes.
const jsStateCalls = 3

// jsOutcome is the JS client step: skipped (Skip set), failed (Err set) or
// the script's result.
type jsOutcome struct {
	Skip string
	Err  error
	Res  jsResult
}

// jsResult is what testdata/jsclient/demo.mjs prints.
type jsResult struct {
	ClientVersion string  `json:"client_version"`
	Node          string  `json:"node"`
	ConnectMS     float64 `json:"connect_ms"`
	PredictMS     float64 `json:"predict_ms"`
	PredictOutput string  `json:"predict_output"`
	State         []struct {
		MS   float64 `json:"ms"`
		Got  string  `json:"got"`
		Want string  `json:"want"`
	} `json:"state"`
	StateOK bool   `json:"state_ok"`
	Error   string `json:"error"`
}

// findJSClient returns the directory holding demo.mjs and an installed
// @gradio/client, or why the step is skipped. dir "" searches the working
// directory and its parents for testdata/jsclient (the source tree).
func findJSClient(dir string) (node, scriptDir, skip string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "", "node is not in PATH (the official JS client needs Node 20+)"
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", "", "no working directory to look for testdata/jsclient from"
		}
		for d := wd; ; d = filepath.Dir(d) {
			c := filepath.Join(d, "testdata", "jsclient")
			if _, err := os.Stat(filepath.Join(c, "demo.mjs")); err == nil {
				dir = c
				break
			}
			if filepath.Dir(d) == d {
				return "", "", "testdata/jsclient not found above " + wd + " (run the demo in the source tree, or pass --jsclient DIR)"
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "demo.mjs")); err != nil {
		return "", "", dir + " has no demo.mjs"
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@gradio", "client", "package.json")); err != nil {
		return "", "", "@gradio/client is not installed in " + dir + " (run `npm ci` there, or `make jsclient`)"
	}
	return node, dir, ""
}

// runJSClient drives one official @gradio/client session through the
// gateway's front door: connect, predict, gr.State across calls.
func (d *demo) runJSClient(ctx context.Context, dir string) jsOutcome {
	node, dir, skip := findJSClient(dir)
	if skip != "" {
		return jsOutcome{Skip: skip}
	}
	ctx, cancel := context.WithTimeout(ctx, jsClientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "demo.mjs", d.base+"/", "--user", jsUser, "--state-calls", fmt.Sprint(jsStateCalls))
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return jsOutcome{Err: fmt.Errorf("node demo.mjs did not finish within %v", jsClientTimeout)}
	}
	if err != nil {
		return jsOutcome{Err: fmt.Errorf("node demo.mjs: %w: %s", err, lastLine(stderr.String()))}
	}
	var res jsResult
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		return jsOutcome{Err: fmt.Errorf("node demo.mjs printed %q: %w", lastLine(string(out)), err)}
	}
	o := jsOutcome{Res: res}
	switch {
	case res.Error != "":
		o.Err = errors.New(res.Error)
	case len(res.State) != jsStateCalls || !res.StateOK:
		o.Err = fmt.Errorf("gr.State was not kept across the calls: %+v", res.State)
	}
	return o
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// jsSummary writes the JS client step's lines of the summary.
func jsSummary(w io.Writer, base string, o jsOutcome) {
	fmt.Fprintln(w)
	switch {
	case o.Skip != "":
		fmt.Fprintf(w, "  official JS client (@gradio/client) through the front door: skipped: %s\n", o.Skip)
		return
	case o.Err != nil && o.Res.ClientVersion == "":
		fmt.Fprintf(w, "  official JS client (@gradio/client) through the front door: FAILED: %v\n", o.Err)
		return
	}
	r := o.Res
	fmt.Fprintf(w, "  official JS client (@gradio/client %s, Node %s) through the front door, Client.connect(%q):\n", r.ClientVersion, r.Node, base+"/")
	fmt.Fprintf(w, "    connect %.1f ms; predict(\"/upper\") %.1f ms -> %q\n", r.ConnectMS, r.PredictMS, r.PredictOutput)
	var got []string
	for _, s := range r.State {
		got = append(got, fmt.Sprintf("%q (%.1f ms)", s.Got, s.MS))
	}
	if o.Err != nil {
		fmt.Fprintf(w, "    FAILED: %v\n", o.Err)
		return
	}
	fmt.Fprintf(w, "    gr.State across %d calls of one client: kept: %s\n", len(r.State), strings.Join(got, ", "))
}
