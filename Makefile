# Targets a newcomer needs: build, images, test, bench, lint, demo.
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/localagent/agent/cmd/agent/cli.Version=$(VERSION)
GOTEST    ?= $(GO) test
TESTFLAGS ?= -race -count=1 -timeout 40m

.PHONY: all deps deps-demo dist build images test test-short test-env test-soak test-kill test-podman test-runsc bench lint kube-check demo demo-python clean

all: build

# Both binaries are static (CGO_ENABLED=0): agent-toolbox is bind-mounted
# into sandbox images that may have no libc at all.
build:
	@echo "==> building $(BIN)/agent and $(BIN)/agent-toolbox (the first build compiles every dependency: a few minutes on two cores)"
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agent ./cmd/agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/agent-toolbox ./cmd/agent-toolbox

# Installs the Debian packages the image builds and tests need (apt-get as
# root; otherwise prints the one command to run and stops).
deps:
	bash scripts/deps.sh

# Builds every image the tests need, offline (skips images already present).
images: deps build
	$(BIN)/agent images build all

# The full suite: unit, integration (real Docker engine, real git) and
# end-to-end tests against the built binary.
test: images
	$(GOTEST) $(TESTFLAGS) ./...

# The environment tests that install real Debian packages (python3,
# golang-go) from the configured mirror: a few minutes on a cold machine.
test-env: images
	AGENT_TEST_ENV=1 $(GOTEST) $(TESTFLAGS) -run 'TestEnv' ./tests/

# The soak: 50 short tasks in a row (merge, keep then merge, discard) must
# leave nothing behind and not grow (about two minutes).
test-soak: images
	AGENT_SOAK=1 $(GOTEST) $(TESTFLAGS) -run 'TestSoak' -v ./tests/

# The random-kill campaign: KILLS times, a task, a merge (also over a
# staged change of yours) or a discard is killed with SIGKILL at a random
# moment, then only the README's recovery table is followed; every run must
# converge with nothing lost or left (about half a minute a run). The seed
# is logged; KILLS_SEED=N repeats a campaign.
KILLS      ?= 20
KILLS_SEED ?=
test-kill: images
	AGENT_TEST_KILLS=$(KILLS) AGENT_TEST_KILLS_SEED=$(KILLS_SEED) $(GOTEST) $(TESTFLAGS) -run 'TestRandomKills' -v ./tests/

# The sandbox suite (hardening, inspect, freeze, sessions, egress, resource
# faults) against rootless Podman as an unprivileged user, through its
# Docker-compatible socket (about two minutes). Needs root: it creates the
# user `agentci` (AGENT_CI_USER) with subordinate id ranges.
test-podman: images
	sh scripts/podman-rootless-tests.sh

# The sandbox suites (hardening, egress, freeze, tool sessions) with their
# sandboxes under gVisor (isolation runsc), through a private rootful
# Podman service whose default runtime is runsc; the Docker daemon's
# configuration is left alone. Needs root; about two minutes.
test-runsc: images
	bash scripts/podman-runsc-tests.sh

# Unit tests only: no Docker engine needed.
test-short:
	$(GOTEST) -short -race -count=1 ./...

# Benchmarks: sandbox and tool-call latency against docker run / docker exec
# in the same run, then the Go benchmarks (agent loop overhead, session memory).
bench: images
	$(BIN)/agent bench
	$(GOTEST) -run '^$$' -bench . -benchmem -count=1 ./...

lint: kube-check
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff

# The Kubernetes backend is its own module (sandbox/kubernetes), so that
# the agent binary does not carry client-go: build, vet and unit-test it
# there, and check that its go.mod and go.sum are tidy. No cluster needed.
kube-check:
	cd sandbox/kubernetes && $(GO) build ./... && $(GO) vet ./... && $(GO) mod tidy -diff && $(GO) test -race -count=1 ./...

# Runs a whole task end to end on a demo repository with a scripted model.
demo: deps-demo build
	$(BIN)/agent images build sandbox
	bash demo/run.sh

# Only the packages the demos need (debootstrap, busybox-static,
# ca-certificates, git, make); `make deps` installs those of the tests too.
deps-demo:
	bash scripts/deps.sh demo

# The same with a real toolchain: a Python package whose environment
# (Debian's python3-pytest) is built once, then its tests run in the sandbox.
demo-python: deps-demo build
	$(BIN)/agent images build sandbox
	bash demo/run-python.sh

# An archive for machines without network: both binaries, the sandbox
# image as a bundle (agent images save), an install note and SHA-256
# checksums, in dist/. Needs what make demo needs.
dist: deps-demo build
	$(BIN)/agent images build sandbox
	bash scripts/dist.sh $(BIN) dist $(VERSION)

clean:
	rm -rf $(BIN) dist
