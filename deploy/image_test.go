// Package deploy_test checks the deployment files: the container image's
// runtime (TestImageRuntime), the systemd unit and the Kubernetes manifests
// (TestSystemdUnit, TestKubernetes), and the Hugging Face Space's route
// handler (TestSpaceRouteHandler).
package deploy_test

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// caBundle is where Debian (and the golang image the Dockerfile builds in)
// keeps the CA bundle the runtime stage copies.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// nonroot is the image's USER.
const nonroot = 65532

// TestDockerfile checks the recipe's promises that TestImageRuntime relies
// on: a static build, a scratch runtime with only the binary, the CA
// bundle and /tmp, a non-root user and a health check.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"CGO_ENABLED=0 go build -trimpath", "-s -w", "./cmd/gradiopool",
		"FROM scratch", "COPY --from=build " + caBundle + " " + caBundle,
		"COPY --from=build /out/tmp /tmp", "COPY --from=build /out/gradiopool /gradiopool",
		fmt.Sprintf("USER %d:%d", nonroot, nonroot), `HEALTHCHECK`, `CMD ["/gradiopool", "health"]`,
		"GRADIOPOOL_LISTEN=0.0.0.0:8080", `ENTRYPOINT ["/gradiopool"]`, `CMD ["serve"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// The runtime image is labelled with the build's version (OCI
	// annotations), from the same build arguments the binary is stamped with.
	_, runtime, _ := strings.Cut(df, "FROM scratch")
	for _, want := range []string{
		"ARG VERSION", "ARG REVISION",
		`org.opencontainers.image.version="${VERSION}"`, `org.opencontainers.image.revision="${REVISION}"`,
		"org.opencontainers.image.source=", `org.opencontainers.image.licenses="Apache-2.0"`,
	} {
		if !strings.Contains(runtime, want) {
			t.Errorf("the Dockerfile's runtime stage lacks %q", want)
		}
	}
	if n := strings.Count(df, "\nCOPY --from=build"); n != 3 {
		t.Errorf("the runtime stage copies %d things, want 3 (CA bundle, /tmp, binary): the test's root would differ", n)
	}
}

// TestImageRuntime stands in for building the image, which this machine
// cannot (no base image can be pulled): it builds the binary as the
// Dockerfile's build stage does, lays out an empty root holding only what
// the runtime stage copies, and runs `serve` there as the image's user with
// only the image's environment plus the replica list. It needs root for
// chroot; CI runs as root.
func TestImageRuntime(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chroot (CI runs as root): run `sudo go test ./deploy/ -run TestImageRuntime`")
	}
	if _, err := os.Stat(caBundle); err != nil {
		t.Fatalf("no CA bundle at %s (Debian's ca-certificates): %v", caBundle, err)
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "gradiopool")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "../cmd/gradiopool")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	assertStatic(t, bin)
	if err := os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(caBundle)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, caBundle), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "tmp"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}

	chrooted := func(env []string, args ...string) *exec.Cmd {
		cmd := exec.Command("/gradiopool", args...)
		cmd.Path = "/gradiopool"
		cmd.Dir = "/"
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: nonroot, Gid: nonroot}}
		return cmd
	}

	t.Run("version with an empty environment", func(t *testing.T) {
		out, err := chrooted(nil, "version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "gradiopool ") {
			t.Fatalf("version in the empty root: %v: %s", err, out)
		}
	})
	t.Run("serve with an empty environment names what is missing", func(t *testing.T) {
		out, err := chrooted(nil, "serve").CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "GRADIOPOOL_REPLICAS") {
			t.Fatalf("serve without configuration: %v: %s", err, out)
		}
	})
	t.Run("serve", func(t *testing.T) {
		sim := gradiotest.NewServer(gradiotest.DefaultApp())
		defer sim.Close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		// The image's environment (Dockerfile ENV, with the port of this
		// test) plus the one setting a deployment must give.
		env := []string{"GRADIOPOOL_LISTEN=" + addr, "GRADIOPOOL_LOG_FORMAT=json", "GRADIOPOOL_REPLICAS=" + sim.URL}
		cmd := chrooted(env, "serve")
		var logs syncBuffer // written by exec's copying goroutine, complete after Wait
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := false
		defer func() {
			if !exited {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		}()
		base := "http://" + addr
		ok := false
		for i := 0; i < 100 && !ok; i++ { // bounded: 10 s
			if resp, err := http.Get(base + "/readyz"); err == nil {
				ok = resp.StatusCode == 200
				resp.Body.Close()
			}
			if !ok {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if !ok {
			t.Fatal("the gateway in the empty root never became ready")
		}
		// The image's HEALTHCHECK, run inside the root as the image runs it.
		if out, err := chrooted([]string{"GRADIOPOOL_LISTEN=" + addr}, "health").CombinedOutput(); err != nil {
			t.Fatalf("health: %v: %s", err, out)
		}
		resp, err := http.Post(base+"/v1/predict/upper", "application/json", strings.NewReader(`{"data":["from scratch"]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"FROM SCRATCH"`) {
			t.Fatalf("predict through the chrooted gateway: %d %s", resp.StatusCode, body)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			exited = true
			if err != nil {
				t.Fatalf("serve after SIGTERM: %v\n%s", err, logs.String())
			}
		case <-ctx.Done():
			t.Fatal("serve did not stop within 30 s of SIGTERM")
		}
		if l := logs.String(); !strings.Contains(l, "gateway stopped") {
			t.Errorf("no drain/stop in the log:\n%s", l)
		}
	})
}

// assertStatic fails unless bin is a static executable: no interpreter
// (dynamic loader) and no shared libraries needed.
func assertStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s has a dynamic loader (PT_INTERP): not static", bin)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("%s needs shared libraries %v", bin, libs)
	}
}

// syncBuffer is a strings.Builder safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
