# Go binaries and tests. Every cmd/<name>/main.go is bin/<name>. The targets are phony: go build
# decides what is stale (an up-to-date binary is neither relinked nor rewritten; about a CPU second each).
GO_BINS := $(patsubst cmd/%/main.go,$(BIN)/%,$(wildcard cmd/*/main.go))
ALL_TARGETS += $(GO_BINS)
TEST_TARGETS += test-go-vet test-go test-race

.PHONY: $(GO_BINS)
$(GO_BINS): $(BIN)/%:
	@mkdir -p $(BIN)
	CGO_ENABLED=1 $(GO_BUILD) -o $@ ./cmd/$*

# The time-slice daemon's tests that start daemons and processes end to end (build tag timeslicee2e).
TIMESLICE_E2E := -tags timeslicee2e ./test/timeslice/e2e/

.PHONY: test-go test-go-vet fuzz-smoke
test-go-vet:
	@test -z "$$(gofmt -l cmd internal pkg test 2>/dev/null)" || { echo "gofmt needed:"; gofmt -l cmd internal pkg test; exit 1; }
	$(GO) vet ./...
	$(GO) vet $(TIMESLICE_E2E)

# Go tests; end-to-end ones use bin/ (built by 'all') through GPUSLICE_BIN. The daemon's end-to-end
# tests run after the others, as they did in internal/timeslice before they moved (go test -list: the same 59).
test-go:
	GPUSLICE_BIN=$(abspath $(BIN)) $(GO) test -count=1 ./...
	GPUSLICE_BIN=$(abspath $(BIN)) $(GO) test -count=1 $(TIMESLICE_E2E)

# The race detector over the packages whose tests assert no timing (the
# daemon's and the e2e tests run under -race by hand: 5-10x slower, their
# wall-clock margins are for the plain build). TestBooksConcurrentReaders and
# TestDriversOpenedConcurrently fail here, and only here, if their races return.
RACE_PKGS := ./internal/alloc/ ./internal/sched/ ./internal/gpu/ ./internal/group/ ./internal/runner/ \
	./internal/cli/ ./internal/elastic/ ./internal/health/ ./internal/mps/
.PHONY: test-race
test-race: all
	GPUSLICE_BIN=$(abspath $(BIN)) $(GO) test -race -count=1 $(RACE_PKGS)

# A short run of every Go fuzz target (the seed corpora run in test-go already).
fuzz-smoke:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 10s $$pkg || exit 1; \
	  done; done

.PHONY: demo
# The demo on the real GPU if a driver is present, else on the simulated one. It builds only what it
# runs (the CLI, the library, the training program and the simulated driver), not all: the README's
# first command stays short on a fresh machine.
demo: $(BIN)/gpuslice $(BIN)/libgpuslice.so $(BIN)/gs-trainer $(BIN)/sim/libcuda.so.1 $(BIN)/sim/libnvidia-ml.so.1
	$(BIN)/gpuslice demo

# The README's first command timed as on a fresh machine (clean clone, empty Go caches; hack/demo-cold.sh).
.PHONY: demo-cold
demo-cold:
	@hack/demo-cold.sh
