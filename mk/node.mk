# Time slicing (the time-slice daemon): internal/policy, internal/proto, internal/timeslice, internal/group,
# internal/groupstate and the launch gate in libgpuslice/src/gate*.c. Their Go unit tests run in test-go (go test ./...);
# the tests that start daemons and processes end to end are test/timeslice/e2e (build tag timeslicee2e,
# TIMESLICE_E2E), run by test-go too; this fragment adds them under ASan/UBSan and the benchmarks.
NODE_BUILD := $(BUILD)/node
NODE_GRANTBENCH := $(NODE_BUILD)/gs-grantbench
NODE_LIBASAN = $(shell $(CC) -print-file-name=libasan.so)
NODE_E2E_ENV = GPUSLICE_BIN=$(abspath $(BIN))
# (mk/simgpu.mk is read after this file: name the simulator's outputs here.)
NODE_SIM := $(BIN)/sim/libcuda.so.1 $(BIN)/sim/libnvidia-ml.so.1
TEST_TARGETS += test-node

$(NODE_GRANTBENCH): test/timeslice/grantbench.c libgpuslice/src/gate_wire.h include/gpuslice/proto.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -fPIE -o $@ $<

.PHONY: test-node bench-node proto-generate verify-cheaders
# The C headers generated from the Go definitions: the socket protocol's (include/gpuslice/proto.h)
# and the group state file's (libgpuslice/include/gpuslice/shm.h, internal/groupstate). Go tests
# (TestHeaderFresh) and `make verify-generate` fail when one is stale.
proto-generate:
	$(GO) generate ./internal/proto ./internal/groupstate

verify-generate: verify-cheaders
verify-cheaders:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	  $(GO) run ./internal/proto/gen -o $$tmp/proto.h && $(GO) run ./internal/groupstate/gen -o $$tmp/shm.h && \
	  diff -u include/gpuslice/proto.h $$tmp/proto.h && diff -u libgpuslice/include/gpuslice/shm.h $$tmp/shm.h || \
	  { echo "generated C headers are stale: run make proto-generate"; exit 1; }

# End-to-end tests with the launch gate built under ASan/UBSan (LD_PRELOAD of libasan first);
# then the shares for 2, 4 and 8 tenants with the release library, alone on the machine (in
# `go test ./...` they would share the CPUs with other packages' tests; there only 2 tenants run).
test-node: $(BIN)/libgpuslice.so $(LIB_ASAN) $(NODE_SIM) $(BIN)/gs-memfill
	$(NODE_E2E_ENV) GPUSLICE_NODE_PRELOAD="$(NODE_LIBASAN) $(abspath $(LIB_ASAN))" \
		ASAN_OPTIONS=detect_leaks=0 $(GO) test -count=1 -run 'E2E' -skip 'E2EShares' $(TIMESLICE_E2E)
	$(NODE_E2E_ENV) GPUSLICE_NODE_E2E_SHARES=1 $(GO) test -count=1 -v -run 'E2EShares' $(TIMESLICE_E2E) \
		| grep -E '^(---|\s+---|ok|FAIL|PASS)|whole run'; exit $${PIPESTATUS[0]}

# Figures for docs/benchmarks.md: grant round trips (Go and C clients; "grants/s" is all clients' grants
# over the wall time: 1 client = 1 / round trip, N clients on GPUs of their own = the daemon's rate),
# the gate's cost per launch, policy simulation, end to end.
bench-node: $(NODE_GRANTBENCH) $(BIN)/libgpuslice.so $(BIN)/gs-bench-hooks $(NODE_SIM)
	@echo "grant round trips: release(MORE) -> next grant, as the gate hands over. grants/s = all clients' grants /" \
		"wall time. clients=1, procs=1: ONE client (1 / round trip); procs=4/gpu=own, clients=4: 4 CONCURRENT" \
		"clients on GPUs of their own (the daemon's rate); gpu=shared: 4 on one GPU (each grant a hand-over);" \
		"gpu=floor: the same exchange with a C peer that answers at once (no daemon: this machine's bound)."
	$(GO) test -run '^$$' -bench 'GrantRoundTrip' -benchtime 1x $(TIMESLICE_E2E) 2>&1 | grep -v '^[IE][0-9]'; exit $${PIPESTATUS[0]}
	$(NODE_E2E_ENV) GPUSLICE_NODE_GRANTBENCH=$(abspath $(NODE_GRANTBENCH)) \
		$(GO) test -run '^$$' -bench 'GrantC|GateLaunch|E2E' -benchtime 1x -timeout 30m -v $(TIMESLICE_E2E) 2>&1 \
		| grep -v '^[IE][0-9]'; exit $${PIPESTATUS[0]}
	$(GO) test -count=1 -v -run 'Sim' ./internal/policy/ | grep -E 'tenants|latency|ok'; exit $${PIPESTATUS[0]}

.PHONY: bench-copy-gate
# Engine work outside kernels under the gate (issue 26 item 3): a copy-only tenant (500 us device memsets,
# share.max 10%) beside a busy online tenant on the simulated GPU, its part of the engine with the library
# of COPY_GATE_BASE (default: main before copies and memsets were gated) and with this tree's, side by side.
COPY_GATE_BASE ?= cbe6c96
bench-copy-gate: $(BIN)/libgpuslice.so $(BIN)/gpuslice $(NODE_SIM)
	rm -rf $(BUILD)/bench-base && mkdir -p $(BUILD)/bench-base
	git archive $(COPY_GATE_BASE) | tar -x -C $(BUILD)/bench-base
	$(MAKE) -s -C $(BUILD)/bench-base bin/libgpuslice.so >/dev/null
	$(NODE_E2E_ENV) GPUSLICE_BENCH_BASE_PRELOAD=$(abspath $(BUILD)/bench-base/bin/libgpuslice.so) \
		$(GO) test -count=1 -run '^$$' -bench 'CopyOnlyTenant' -benchtime 1x $(TIMESLICE_E2E) 2>&1 \
		| grep -v '^[IE][0-9]'; exit $${PIPESTATUS[0]}

.PHONY: bench-elastic
# Elastic memory (docs/elastic-memory.md): borrow round trip, allocation cost below/above memory.min, the
# three-group spill scenario on the simulated GPU, the model's random interleavings, four bursty tenants
# elastic vs static. Last line: the summary (`elastic: guarantees broken ...`).
bench-elastic: all
	@GPUSLICE_BIN=$(abspath $(BIN)) $(GO) test -tags elasticbench -count=1 -v -run '^TestBenchElastic$$' ./test/e2e/ >$(BUILD)/bench-elastic.log 2>&1; \
	  rc=$$?; grep '^figure: ' $(BUILD)/bench-elastic.log | sed 's/^figure: //'; \
	  test $$rc -eq 0 || { grep -v '^I[0-9]' $(BUILD)/bench-elastic.log | tail -30; exit 1; }; \
	  grep '^elastic: ' $(BUILD)/bench-elastic.log

.PHONY: bench-gate-cost
# The launch gate's cost with the grant held (issue 26): libgpuslice of GATE_BASE (built from git) and of this
# tree side by side in one run, GATE_RUNS times (hack/bench-gate-cost.sh; figures in docs/benchmarks.md).
GATE_BASE ?= cdf3182
GATE_RUNS ?= 3
bench-gate-cost:
	hack/bench-gate-cost.sh $(GATE_BASE) $(GATE_RUNS)

.PHONY: bench-compare
# make bench-hooks and bench-node's grant round trips of BENCH_BASE (built from git, as test-upgrade does) and
# of this tree side by side in one run (hack/bench-compare.sh; figures in docs/benchmarks.md).
BENCH_BASE ?= ba6fd52
bench-compare:
	hack/bench-compare.sh $(BENCH_BASE)
