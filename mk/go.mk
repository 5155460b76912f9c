# Go binaries and tests.
GO_SOURCES := $(shell find cmd internal pkg -name '*.go' -not -name '*_test.go' 2>/dev/null) go.mod
ALL_TARGETS += $(BIN)/gpuslice
TEST_TARGETS += test-go-vet test-go

$(BIN)/gpuslice: $(GO_SOURCES)
	@mkdir -p $(BIN)
	CGO_ENABLED=1 $(GO_BUILD) -o $@ ./cmd/gpuslice

.PHONY: test-go test-go-vet fuzz-smoke
test-go-vet:
	@test -z "$$(gofmt -l cmd internal pkg 2>/dev/null)" || { echo "gofmt needed:"; gofmt -l cmd internal pkg; exit 1; }
	$(GO) vet ./...

# Go tests; end-to-end ones use bin/ (built by 'all') through GPUSLICE_BIN.
test-go:
	GPUSLICE_BIN=$(abspath $(BIN)) $(GO) test -count=1 ./...

# A short run of every Go fuzz target (the seed corpora run in test-go already).
fuzz-smoke:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 10s $$pkg || exit 1; \
	  done; done

.PHONY: demo
# The demo on the real GPU if a driver is present, else on the simulated one.
demo: all
	$(BIN)/gpuslice demo
