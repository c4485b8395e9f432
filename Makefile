# The README's two commands are `make demo` and `make test`.
GO ?= go
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2
JSCLIENT = testdata/jsclient

.PHONY: demo test deps lint unit jsclient bench bench-pool build release release-check print-version fuzz reliability abuse test-real

# demo installs the official JS client (pinned by its lock file) first when
# Node and npm are there and it is missing, so that a fresh clone runs the
# demo's JS client step; without Node or npm the demo says why it skips it.
demo:
	@if [ ! -d $(JSCLIENT)/node_modules/@gradio/client ] && command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		echo "npm ci in $(JSCLIENT) (the demo's official JS client step)"; \
		(cd $(JSCLIENT) && npm ci --no-audit --no-fund --loglevel=error) || echo "npm ci failed: the demo will skip its JS client step"; \
	fi
	$(GO) run ./cmd/gradiopool demo

# build stamps the version `gradiopool version` prints and strips the symbol
# tables, like the Dockerfile. The version is the tag of the commit when it
# has one (v0.9.0), else the newest release of CHANGELOG.md, the commit and
# "dirty" when the tree is modified (v0.9.0+g0f3946f.dirty): a semantic
# version either way.
RELEASE := $(shell sed -n 's/^\#\# \[\([0-9][0-9.]*\)\] - .*/\1/p' CHANGELOG.md | head -1)
VERSION ?= $(shell git describe --tags --exact-match --dirty 2>/dev/null || \
	echo "v$(RELEASE)+g$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD 2>/dev/null || echo .dirty)")
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS = -s -w -X github.com/gradiopool/gradiopool/internal/version.stamped=$(VERSION) \
	-X github.com/gradiopool/gradiopool/internal/version.stampedRevision=$(REVISION)
build:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -trimpath -ldflags '$(LDFLAGS)' -o bin/gradiopool ./cmd/gradiopool
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -trimpath -ldflags '$(LDFLAGS)' -o bin/gradiopool-bench ./cmd/gradiopool-bench

# release writes dist/: gradiopool_VERSION_OS_ARCH.tar.gz for linux and
# darwin on amd64 and arm64 (the binary, LICENSE, README.md, CHANGELOG.md,
# docs/*.md, the example configuration) and SHA256SUMS. It is reproducible
# (scripts/release.sh says how); release-check proves it by building twice
# from two directories. VERSION is the newest release of CHANGELOG.md
# unless given (make release VERSION=v0.9.1).
release:
	scripts/release.sh dist

# print-version prints the version build stamps (for docker build --build-arg).
print-version:
	@echo $(VERSION)

release-check:
	scripts/release-check.sh

# test is what CI runs: it installs what the tests need when missing (deps),
# then vet, staticcheck, the official JS client for the conformance suite,
# and every Go test under the race detector. The REQUIRE variables make the
# Node conformance suite, the real-Redis tests and the dashboard's browser
# test fail, not skip, when Node, redis-server or chromium is missing; the
# browser test's screenshot goes to GRADIOPOOL_ARTIFACTS.
test: deps lint jsclient unit

deps:
	@bash scripts/test-deps.sh

lint:
	@test -z "$$(gofmt -l . | grep -v '^testdata/')" || (gofmt -l . ; echo 'gofmt needed'; exit 1)
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	@command -v promtool >/dev/null || (echo 'promtool is missing: make deps (Debian package prometheus)'; exit 1)
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml

jsclient: deps
	cd $(JSCLIENT) && npm ci --no-audit --no-fund --loglevel=error
	cd testdata/nextjs-check && npm ci --no-audit --no-fund --loglevel=error

unit:
	GRADIOPOOL_REQUIRE_NODE=1 GRADIOPOOL_REQUIRE_REDIS=1 GRADIOPOOL_REQUIRE_CHROMIUM=1 \
	GRADIOPOOL_ARTIFACTS=$(CURDIR)/test-artifacts $(GO) test -race -count=1 -timeout 30m ./...

bench:
	$(GO) run ./cmd/gradiopool-bench

bench-pool:
	$(GO) test -run '^$$' -bench BenchmarkAcquireRelease -benchmem ./pool/sessionpool/

# fuzz runs every fuzz target for FUZZTIME (the seeds, from the recorded
# transcripts, also run in every `go test`, so make test checks them). It is
# not part of make test: once, a 5 s run failed without writing a
# reproducer (a fuzzing-engine failure, not a found input), which would make
# CI fail at random. Targets are found by name, one at a time
# (go test -fuzz takes one target per package and run).
FUZZTIME ?= 5s
fuzz:
	@set -e; for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v node_modules | xargs -n1 dirname | sort -u); do \
		for fn in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "fuzz $$pkg $$fn"; \
			$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg > /tmp/gradiopool-fuzz.log 2>&1 || { tail -30 /tmp/gradiopool-fuzz.log; exit 1; }; \
		done; \
	done

# reliability runs the long fault matrix and soak and writes
# docs/RELIABILITY.md (CI runs the short version inside `go test`).
reliability:
	GRADIOPOOL_RELIABILITY=long $(GO) test -count=1 -timeout 120m -run 'TestFaultMatrix|TestSoak' -v ./reliability/

# abuse runs each attack of issue 20 at full size against a `gradiopool
# serve` subprocess (its RSS and goroutines measured) and rewrites the abuse
# region of docs/RELIABILITY.md, about 3 minutes (CI runs the short form
# inside `go test ./reliability/`).
abuse:
	GRADIOPOOL_RELIABILITY=abuse $(GO) test -count=1 -timeout 20m -run 'TestAbuse' -v ./reliability/

# test-real runs the Go client's protocol suite, the official JS client's
# conformance suite (sse_v3 apps) and the raw-wire suite against the real
# Gradio apps listed in GRADIOPOOL_REAL_URLS (comma-separated), then the
# pool and the gateway on three of them (and, opt-in, the given-up joins
# and the replica short of threads on servers of their own:
# GRADIOPOOL_REAL_RELAYED / _BRIDGED / _THREADS), and rewrites the table in
# docs/COMPATIBILITY.md. Without the variable it prints one line and passes
# (CI has no real servers). docs/COMPATIBILITY.md says how to start them.
test-real:
	$(GO) run ./internal/realcompat -write docs/COMPATIBILITY.md
