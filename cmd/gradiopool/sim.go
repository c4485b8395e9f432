package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// exampleSpaces are Space ids sim registers the first replicas under as
// well, so that a configuration written for a real deployment (owner/app,
// its dev and stage copies) can be tried against the simulator.
var exampleSpaces = []string{"owner/app", "owner/app-dev", "owner/app-stage"}

// runSim starts simulated Gradio replicas and a Hub emulation on loopback and
// serves them until ctx ends.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	replicas := fs.Int("replicas", 3, "number of simulated Gradio replicas")
	addr := fs.String("addr", "", "HOST:PORT of the first replica; the others use the following ports (default: random ports on 127.0.0.1)")
	hubAddr := fs.String("hub-addr", "127.0.0.1:0", "HOST:PORT of the Hugging Face Hub emulation")
	mode := fs.String("mode", string(gradiotest.Gradio5), "Gradio generation: gradio5, gradio6, gradio4-sse_v3, gradio4-sse_v2.1, gradio4-sse_v2, gradio4-sse_v1, gradio4-sse")
	connectCost := fs.Duration("connect-cost", 0, "delay on /config, /info and the Hub look-up (the seed saw 2-5s)")
	jitter := fs.Duration("connect-jitter", 0, "extra random connect delay in [0, D) (e.g. -connect-cost 2s -connect-jitter 3s)")
	latency := fs.Duration("latency", 0, "extra latency of every call")
	stepDelay := fs.Duration("step-delay", 0, "pause between generator yields (0: 300ms)")
	timeScale := fs.Float64("time-scale", 0, "multiplier for built-in sleeps (0: 1)")
	heartbeat := fs.Duration("heartbeat", 0, "heartbeat interval (0: 15s)")
	maxQueue := fs.Int("max-queue", 0, "queue max_size per replica (0: unlimited)")
	concurrency := fs.Int("concurrency", 0, "concurrency limit per endpoint (0: 1, negative: unlimited)")
	maxFile := fs.Int64("max-file-size", 0, "upload limit in bytes (0: unlimited)")
	token := fs.String("private", "", "make the Spaces private, readable with this HF token")
	user := fs.String("username", "", "protect the apps with Gradio login (with -password)")
	pass := fs.String("password", "", "password for -username")
	appName := fs.String("app", "default", "simulated app: default (upper, count, slow, counter, fail, reverse_file) or chat")
	seedNames := fs.Bool("seed-names", true, "also register the first replicas as "+strings.Join(exampleSpaces, ", "))
	hubOwner := fs.String("hub-owner-token", "", "token of the Spaces' owner: the Hub's pause/restart/sleeptime/hardware routes answer 403 to any other (default: any token)")
	hubStart := fs.Duration("hub-start-time", gradiotest.DefaultHubStartTime, "median time a Space spends APP_STARTING (after a build, or a visit to a STOPPED Space)")
	hubBuild := fs.Duration("hub-build-time", gradiotest.DefaultHubBuildTime, "median time a restarted Space spends BUILDING")
	hubSpread := fs.Float64("hub-start-spread", 0, "lognormal sigma of build and start times (0: always the median)")
	hubRate := fs.Int("hub-rate-limit", 0, "Hub API calls per token per 5 minutes before 429 (0: unlimited; the real Hub allows 1000 to a free account)")
	hubLookupWakes := fs.Bool("hub-lookup-wakes", false, "a Hub look-up of a STOPPED Space wakes it (unverified on the real Hub)")
	hubHardware := fs.String("hub-hardware", "", "hardware flavor of the Spaces, e.g. l4x1 (default cpu-basic); sets the billing price")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gradiopool sim [--replicas 3] [--addr HOST:PORT] [--mode gradio5] [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serves simulated Gradio apps (package gradio/gradiotest) and a Hugging Face Hub")
		fmt.Fprintln(stderr, "emulation on loopback until interrupted, and prints their URLs and Space ids:")
		fmt.Fprintln(stderr, "something to point `gradiopool serve` (GRADIOPOOL_HUB_URL for the Space ids)")
		fmt.Fprintln(stderr, "or `gradiopool call` at without any network. The knobs below shape connect")
		fmt.Fprintln(stderr, "cost, latency, queues, the protocol generation and authentication.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: sim takes no arguments, got %q", errUsage, fs.Args())
	}
	if *hubStart < 0 || *hubBuild < 0 || *hubSpread < 0 || *hubRate < 0 {
		return fmt.Errorf("%w: -hub-start-time, -hub-build-time, -hub-start-spread and -hub-rate-limit must not be negative", errUsage)
	}
	if _, ok := gradiotest.DefaultHardwarePrices[*hubHardware]; *hubHardware != "" && !ok {
		return fmt.Errorf("%w: unknown -hub-hardware %q", errUsage, *hubHardware)
	}
	if *replicas < 1 {
		return fmt.Errorf("%w: -replicas must be at least 1", errUsage)
	}
	m, err := gradiotest.ParseMode(*mode)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var newApp func() *gradiotest.App
	switch *appName {
	case "default":
		newApp = gradiotest.DefaultApp
	case "chat":
		newApp = gradiotest.ChatApp
	default:
		return fmt.Errorf("%w: unknown -app %q (default or chat)", errUsage, *appName)
	}
	host, port := "127.0.0.1", 0
	if *addr != "" {
		h, p, err := net.SplitHostPort(*addr)
		if err != nil {
			return fmt.Errorf("%w: -addr: %v", errUsage, err)
		}
		if port, err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("%w: -addr port %q", errUsage, p)
		}
		if h != "" {
			host = h
		}
	}

	hl, err := net.Listen("tcp", *hubAddr)
	if err != nil {
		return fmt.Errorf("sim: hub: %w", err)
	}
	hub := gradiotest.NewHubListener(hl)
	defer hub.Close()
	hub.SetConnectCost(*connectCost)
	hub.SetOwnerToken(*hubOwner)
	hub.SetStartTimes(*hubBuild, *hubStart)
	if *hubSpread > 0 {
		hub.SetStartSpread(*hubSpread, uint64(time.Now().UnixNano()))
	}
	hub.SetRateLimit(*hubRate)
	hub.SetLookupWakes(*hubLookupWakes)

	var servers []*gradiotest.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for i := 0; i < *replicas; i++ {
		p := 0
		if port != 0 {
			p = port + i
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return fmt.Errorf("sim: replica %d: %w", i+1, err)
		}
		s := &gradiotest.Server{Listener: l, Mode: m, App: newApp()} // Start fills the other defaults
		s.Username, s.Password = *user, *pass
		s.ConnectCost = *connectCost
		s.ConnectJitter = *jitter
		s.Latency = *latency
		s.StepDelay = *stepDelay
		s.TimeScale = *timeScale
		s.HeartbeatInterval = *heartbeat
		s.MaxQueueSize = *maxQueue
		s.DefaultConcurrencyLimit = *concurrency
		s.MaxFileSize = *maxFile
		s.Start()
		servers = append(servers, s)
		ids := []string{fmt.Sprintf("sim/replica-%d", i+1)}
		if *seedNames && i < len(exampleSpaces) {
			ids = append(ids, exampleSpaces[i])
		}
		for _, id := range ids {
			hub.AddSpace(id, s)
			if *hubHardware != "" {
				hub.SetHardware(id, *hubHardware)
			}
			if *token != "" {
				hub.SetPrivate(id, *token)
			}
		}
		fmt.Fprintf(stdout, "replica %d %s", i+1, s.URL)
		for _, id := range ids {
			fmt.Fprintf(stdout, " %s", id)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "hub %s\n", hub.URL)
	fmt.Fprintf(stdout, "ready: %d replicas, Gradio %s (%s); control at <replica>/_sim/state; Ctrl-C stops\n",
		len(servers), m.Version(), m.Protocol())
	<-ctx.Done()
	start := time.Now()
	for _, s := range servers {
		s.Close()
	}
	servers = nil
	fmt.Fprintf(stdout, "stopped (%v)\n", time.Since(start).Round(time.Millisecond))
	return nil
}
