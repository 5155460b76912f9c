# Tests of libgpuslice (included by mk/libgpuslice.mk). Everything runs under
# ASan/UBSan: unit tests link the pure sources directly; the hook tests link
# $(LIB_ASAN) and run against the simulated GPU in $(BIN)/sim.
LIB_TEST_BIN := $(BUILD)/asan/libgpuslice-tests
LIB_TEST_CFLAGS = $(CFLAGS_COMMON) $(SAN_FLAGS) -I$(LIB_DIR)/include
LIB_UNIT_SRCS := $(addprefix $(LIB_DIR)/src/,account.c config.c group.c group_fault.c group_mount.c hello.c hot.c libc_sym.c log.c procfs.c ctxmap.c ptrfast.c ptrtab.c view.c)
LIB_UNIT_TESTS := $(addprefix $(LIB_TEST_BIN)/,unit_parse_test unit_acct_test unit_ptrs_test unit_grant_test group_test group_claim_test)
LIB_HOOK_TESTS := $(addprefix $(LIB_TEST_BIN)/,hooks_resolve_test hooks_mem_test hooks_drvmem_test hooks_guess_test hooks_ctxseed_test hooks_mig_test hooks_group_test hooks_groups_test hooks_mps_test hooks_pool_test)
LIB_REL_TESTS := $(addprefix $(LIB_TEST_BIN)/,reliability_mem_test reliability_graph_test reliability_container_test reliability_prop_test)
LIB_TEST_DEPS := $(LIB_DEPS) $(wildcard $(LIB_DIR)/tests/*.h) simgpu/src/simstate.h simgpu/src/config.h
LIB_SIM := $(BIN)/sim/libcuda.so.1 $(BIN)/sim/libnvidia-ml.so.1 $(BIN)/sim/gpuslice-sim-mps-control
LIB_LINK_ASAN := -L$(BUILD)/asan -Wl,-rpath,$(abspath $(BUILD)/asan) -Wl,--no-as-needed -lgpuslice
LIB_TEST_ENV := LD_LIBRARY_PATH=$(abspath $(BIN)/sim) ASAN_OPTIONS=detect_leaks=1

$(LIB_UNIT_TESTS): $(LIB_TEST_BIN)/%: $(LIB_DIR)/tests/%.c $(LIB_TEST_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_TEST_CFLAGS) -DGS_TEST_HOOKS -o $@ $< $(LIB_UNIT_SRCS) -ldl -lpthread

$(LIB_HOOK_TESTS) $(LIB_REL_TESTS): $(LIB_TEST_BIN)/%: $(LIB_DIR)/tests/%.c $(LIB_TEST_DEPS) $(LIB_ASAN)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_TEST_CFLAGS) -o $@ $< $(LIB_LINK_ASAN) -ldl -lpthread

$(LIB_TEST_BIN)/libgsnext_%.so: $(LIB_DIR)/tests/dlnext_lib.c
	@mkdir -p $(dir $@)
	$(CC) $(LIB_TEST_CFLAGS) -shared -DWHICH="'$(shell echo $* | tr a-z A-Z)'" -o $@ $<

$(LIB_TEST_BIN)/dlnext_test: $(LIB_DIR)/tests/dlnext_test.c $(LIB_ASAN) $(LIB_TEST_BIN)/libgsnext_a.so \
		$(LIB_TEST_BIN)/libgsnext_b.so $(LIB_TEST_DEPS)
	$(CC) $(LIB_TEST_CFLAGS) -o $@ $< $(LIB_LINK_ASAN) -L$(LIB_TEST_BIN) -Wl,-rpath,$(abspath $(LIB_TEST_BIN)) \
		-lgsnext_a -lgsnext_b -ldl

# The probe twice: plain (for the release library) and under ASan.
$(LIB_TEST_BIN)/preload_probe: $(LIB_DIR)/tests/preload_probe.c include/gpuslice/cuda_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $< -ldl
$(LIB_TEST_BIN)/preload_probe_asan: $(LIB_DIR)/tests/preload_probe.c include/gpuslice/cuda_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(LIB_TEST_CFLAGS) -o $@ $< -ldl

.PHONY: test-lib test-lib-unit test-lib-hooks test-lib-preload
test-lib-unit: $(LIB_UNIT_TESTS)
	@set -e; for t in $^; do echo "  $$t"; $$t; done

test-lib-hooks: $(LIB_HOOK_TESTS) $(LIB_TEST_BIN)/dlnext_test $(LIB_SIM)
	@set -e; for t in $(LIB_HOOK_TESTS) $(LIB_TEST_BIN)/dlnext_test; do echo "  $$t"; $(LIB_TEST_ENV) $$t; done

test-lib-preload: $(LIB_TEST_BIN)/preload_probe $(LIB_TEST_BIN)/preload_probe_asan $(BIN)/libgpuslice.so $(LIB_ASAN) $(LIB_SIM)
	$(LIB_TEST_ENV) $(LIB_DIR)/tests/preload_test.sh $(LIB_TEST_BIN)/preload_probe $(abspath $(BIN)/libgpuslice.so)
	$(LIB_TEST_ENV) $(LIB_DIR)/tests/preload_test.sh $(LIB_TEST_BIN)/preload_probe_asan $(abspath $(LIB_ASAN)) \
		$(shell $(CC) -print-file-name=libasan.so)

# NVML drift check: our declarations (include/gpuslice/nvml_abi.h, the NVML
# entries of hooks.def) compiled against NVIDIA's nvml.h from the go-nvml
# module in the module cache (go.mod pins the version; never committed): a
# signature mismatch fails the build, a size/offset/constant mismatch the run.
LIB_DRIFT := $(LIB_DIR)/tests/drift
LIB_DRIFT_SRCS := $(wildcard $(LIB_DRIFT)/*) $(LIB_DIR)/src/hooks.def include/gpuslice/nvml_abi.h
.PHONY: test-lib-drift
test-lib-drift: $(LIB_DRIFT_SRCS)
	@mkdir -p $(LIB_TEST_BIN)
	$(GO) mod download github.com/NVIDIA/go-nvml
	d=$$($(GO) list -m -f '{{.Dir}}' github.com/NVIDIA/go-nvml) && test -f "$$d/gen/nvml/nvml.h" && \
	$(CC) $(CFLAGS_COMMON) -Iinclude -DDRIFT_OURS -c -o $(LIB_TEST_BIN)/drift_ours.o $(LIB_DRIFT)/nvml_drift.c && \
	$(CC) $(CFLAGS_COMMON) -I"$$d/gen/nvml" -c -o $(LIB_TEST_BIN)/drift_nvml.o $(LIB_DRIFT)/nvml_drift.c && \
	$(CC) $(CFLAGS_COMMON) -o $(LIB_TEST_BIN)/nvml_drift $(LIB_DRIFT)/nvml_drift_main.c \
		$(LIB_TEST_BIN)/drift_ours.o $(LIB_TEST_BIN)/drift_nvml.o && $(LIB_TEST_BIN)/nvml_drift

# Many members at once, each its own program under LD_PRELOAD (crowd_test.c): 160 jobs in 4 groups of 3 GiB
# with 64 MiB contexts all succeed, each charged its own context and 4 MiB (issue 38); 240 jobs at one instant in
# one 2 GiB group (contexts free) all succeed, each charged its 4 MiB (issue 36; timed: bench-lib-starts); 4 processes x 16 threads
# (alloc, pitch, async, VMM, context creation) in a 1 GiB group with 300 MiB contexts never make the device hold
# more than the limit, sampled through NVML every 2 ms for 10 s, 3 runs in a row (issue 36; the ASan library), in
# groups without the node and in groups the node made with its probe's figure for the device.
LIB_CROWD := $(LIB_TEST_BIN)/crowd_test
LIB_CROWD_SRCS := $(LIB_DIR)/tests/crowd_test.c $(LIB_DIR)/tests/crowd_child.c apps/cuapi.c
$(LIB_CROWD): $(LIB_CROWD_SRCS) $(LIB_DIR)/tests/crowd.h $(LIB_DIR)/tests/check.h apps/cuapi.h $(LIB_TEST_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -I$(LIB_DIR)/include -o $@ $(LIB_CROWD_SRCS) -ldl -lpthread

.PHONY: test-lib-crowd
LIB_CROWD_ASAN_PRELOAD = $(shell $(CC) -print-file-name=libasan.so) $(abspath $(LIB_ASAN))
test-lib-crowd: $(LIB_CROWD) $(BIN)/libgpuslice.so $(LIB_ASAN) $(LIB_SIM)
	LD_LIBRARY_PATH=$(abspath $(BIN)/sim) GPUSLICE_LOG=0 $(LIB_CROWD) jobs $(abspath $(BIN)/libgpuslice.so) \
		160 4 3221225472 67108864
	LD_LIBRARY_PATH=$(abspath $(BIN)/sim) GPUSLICE_LOG=0 $(LIB_CROWD) jobs $(abspath $(BIN)/libgpuslice.so) \
		240 1 2147483648 0
	LD_LIBRARY_PATH=$(abspath $(BIN)/sim) GPUSLICE_LOG=0 ASAN_OPTIONS=detect_leaks=0 \
		$(LIB_CROWD) limit "$(LIB_CROWD_ASAN_PRELOAD)" 3 10
	LD_LIBRARY_PATH=$(abspath $(BIN)/sim) GPUSLICE_LOG=0 ASAN_OPTIONS=detect_leaks=0 \
		$(LIB_CROWD) limit "$(LIB_CROWD_ASAN_PRELOAD)" 3 10 seeded

test-lib: test-lib-unit test-lib-hooks test-lib-preload test-lib-drift test-lib-crowd

# The accounting half of `make test-reliability` (mk/reliability.mk); the
# property test once per seed (a failure prints its seed and replays with it).
LIB_PROP_SEEDS ?= 1 2 3 4 5
.PHONY: test-reliability-lib
test-reliability-lib: $(LIB_REL_TESTS) $(LIB_SIM)
	@set -e; for t in $(LIB_TEST_BIN)/reliability_mem_test $(LIB_TEST_BIN)/reliability_graph_test \
		$(LIB_TEST_BIN)/reliability_container_test; do \
		echo "  $$t"; $(LIB_TEST_ENV) $$t; done; \
	t=$(LIB_TEST_BIN)/reliability_prop_test; for s in $(LIB_PROP_SEEDS); do \
		echo "  $$t (GPUSLICE_PROP_SEED=$$s)"; GPUSLICE_PROP_SEED=$$s $(LIB_TEST_ENV) $$t; done

# libFuzzer over the parsers (optional: needs clang; not part of `make test`).
LIB_FUZZ_CC ?= $(firstword $(shell command -v clang clang-16 clang-15 clang-14 2>/dev/null))
LIB_FUZZ_SECONDS ?= 30
.PHONY: fuzz-lib
fuzz-lib:
	@test -n "$(LIB_FUZZ_CC)" || { echo "fuzz-lib needs clang (apt-get install clang)"; exit 1; }
	@mkdir -p $(LIB_TEST_BIN)/fuzz-corpus
	$(LIB_FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -I$(LIB_DIR)/include \
		-o $(LIB_TEST_BIN)/fuzz_parsers $(LIB_DIR)/tests/fuzz_parsers.c $(LIB_UNIT_SRCS) -ldl -lpthread
	$(LIB_TEST_BIN)/fuzz_parsers -max_total_time=$(LIB_FUZZ_SECONDS) $(LIB_TEST_BIN)/fuzz-corpus

# Benchmarks (not tests; docs/benchmarks.md). bench-lib-ctx: a context's creation + destruction through the
# library at LIB_BENCH_BASE (built from git into $(BUILD)/bench-base) and through this one, and bare, one
# process per round each, alternating (crowd_test ctxcost). bench-lib-starts: 240 jobs started at one instant in
# one 2 GiB group (cuInit, 4 MiB, one 1 ms kernel; contexts free), bare and under the library alternately, 6
# trials: the slowest job of each, the jobs of 1 s or more, each step's mean and longest. LIB_STARTS_CONTEXT
# (bytes, default 0 = contexts free) sets the simulator's context memory for every half: a seed under 1 MiB is
# no context's figure (issue 36's review finding 3), so the seeded half reserves by the node's figure only with
# contexts of 1 MiB or more (e.g. LIB_STARTS_CONTEXT=2097152).
LIB_BENCH_BASE ?= 11801c1
LIB_BENCH_BASE_SO := $(BUILD)/bench-base/$(LIB_BENCH_BASE)/bin/libgpuslice.so
$(LIB_BENCH_BASE_SO):
	rm -rf $(BUILD)/bench-base/$(LIB_BENCH_BASE) && mkdir -p $(BUILD)/bench-base/$(LIB_BENCH_BASE)
	git archive $(LIB_BENCH_BASE) Makefile mk include libgpuslice | tar -x -C $(BUILD)/bench-base/$(LIB_BENCH_BASE)
	$(MAKE) -C $(BUILD)/bench-base/$(LIB_BENCH_BASE) bin/libgpuslice.so

.PHONY: bench-lib-ctx bench-lib-starts
LIB_STARTS_CONTEXT ?= 0
bench-lib-ctx: $(LIB_CROWD) $(BIN)/libgpuslice.so $(LIB_BENCH_BASE_SO) $(LIB_SIM)
	LD_LIBRARY_PATH=$(abspath $(BIN)/sim) GPUSLICE_LOG=0 $(LIB_CROWD) ctxcost $(abspath $(LIB_BENCH_BASE_SO)) \
		$(abspath $(BIN)/libgpuslice.so) 9

bench-lib-starts: $(LIB_CROWD) $(BIN)/libgpuslice.so $(LIB_SIM)
	LD_LIBRARY_PATH=$(abspath $(BIN)/sim) GPUSLICE_LOG=0 $(LIB_CROWD) bench $(abspath $(BIN)/libgpuslice.so) \
		240 6 2147483648 $(LIB_STARTS_CONTEXT)
