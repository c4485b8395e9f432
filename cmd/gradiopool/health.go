package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
)

// runHealth is `gradiopool health`: GET /healthz of a gateway on this
// machine and exit 0 only on 200. It exists for the container image's
// HEALTHCHECK, which runs in an image with no shell, curl or wget.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "URL to check (default: /healthz on the address of "+listenEnv+", on loopback)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gradiopool health [--url URL] [--timeout 3s]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Asks a running gateway's GET /healthz and exits 0 on 200, 1 otherwise: the")
		fmt.Fprintln(stderr, "container image's HEALTHCHECK (the image has no shell or curl).")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: health takes no arguments, got %q", errUsage, fs.Args())
	}
	target := *url
	if target == "" {
		target = healthURL(os.Getenv(listenEnv))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %d: %s", target, resp.StatusCode, body)
	}
	fmt.Fprintf(stdout, "%s\n", body)
	return nil
}

// listenEnv is the environment variable of the listen address.
const listenEnv = "GRADIOPOOL_LISTEN"

// healthURL is /healthz on the listen address, reached over loopback when
// the gateway listens on every interface.
func healthURL(listen string) string {
	if listen == "" {
		listen = gateway.DefaultListen
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen + "/healthz"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz"
}
