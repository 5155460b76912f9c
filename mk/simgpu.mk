# Simulated GPU (simgpu/, a stand-in for the NVIDIA driver; `--driver sim` at runtime):
# bin/sim/libcuda.so.1 and bin/sim/libnvidia-ml.so.1.
# Tests: `make test-sim` (ASan/UBSan builds under build/asan/sim).
SIM_DIR := simgpu
SIM_BIN := $(BIN)/sim
SIM_ASAN := $(BUILD)/asan/sim
SIM_COMMON := config.c config_env.c mig.c mps_limit.c state.c statefile.c engine.c
SIM_CUDA := init.c device.c errors.c ctx.c ctx_ops.c ctx_limit.c queue.c stream.c event.c module.c launch.c \
	alloc.c mem.c pool.c vmm.c array.c copy.c misc.c graph.c graph_exec.c graph_mem.c procaddr.c mps.c ptx.c
SIM_NVML := nvml.c nvml_device.c nvml_procs.c nvml_acct.c nvml_events.c nvml_mig.c nvml_migci.c nvml_migdev.c
SIM_CUDA_SRC := $(addprefix $(SIM_DIR)/src/,$(SIM_COMMON) $(SIM_CUDA))
SIM_NVML_SRC := $(addprefix $(SIM_DIR)/src/,$(SIM_COMMON) $(SIM_NVML))
SIM_HDRS := $(wildcard $(SIM_DIR)/src/*.h) include/gpuslice/cuda_abi.h include/gpuslice/nvml_abi.h
SIM_LDFLAGS := -shared -Wl,-Bsymbolic -Wl,-z,defs -pthread
SIM_LIBS := $(SIM_BIN)/libcuda.so.1 $(SIM_BIN)/libcuda.so $(SIM_BIN)/libnvidia-ml.so.1 $(SIM_BIN)/libnvidia-ml.so

ALL_TARGETS += $(SIM_LIBS)
TEST_TARGETS += test-sim

$(SIM_BIN) $(SIM_ASAN):
	mkdir -p $@

$(SIM_BIN)/libcuda.so.1: $(SIM_CUDA_SRC) $(SIM_HDRS) $(SIM_DIR)/libcuda.map | $(SIM_BIN)
	$(CC) $(CFLAGS_COMMON) $(SIM_LDFLAGS) -Wl,-soname,libcuda.so.1 \
		-Wl,--version-script=$(SIM_DIR)/libcuda.map -o $@ $(SIM_CUDA_SRC)

$(SIM_BIN)/libnvidia-ml.so.1: $(SIM_NVML_SRC) $(SIM_HDRS) $(SIM_DIR)/libnvml.map | $(SIM_BIN)
	$(CC) $(CFLAGS_COMMON) $(SIM_LDFLAGS) -Wl,-soname,libnvidia-ml.so.1 \
		-Wl,--version-script=$(SIM_DIR)/libnvml.map -o $@ $(SIM_NVML_SRC)

$(SIM_BIN)/%.so: $(SIM_BIN)/%.so.1
	ln -sf $(notdir $<) $@

# Sanitizer builds of both libraries and the tests.
$(SIM_ASAN)/libcuda.so.1: $(SIM_CUDA_SRC) $(SIM_HDRS) $(SIM_DIR)/libcuda.map | $(SIM_ASAN)
	$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) $(SIM_LDFLAGS) -Wl,-soname,libcuda.so.1 \
		-Wl,--version-script=$(SIM_DIR)/libcuda.map -o $@ $(SIM_CUDA_SRC)

$(SIM_ASAN)/libnvidia-ml.so.1: $(SIM_NVML_SRC) $(SIM_HDRS) $(SIM_DIR)/libnvml.map | $(SIM_ASAN)
	$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) $(SIM_LDFLAGS) -Wl,-soname,libnvidia-ml.so.1 \
		-Wl,--version-script=$(SIM_DIR)/libnvml.map -o $@ $(SIM_NVML_SRC)

$(SIM_ASAN)/%.so: $(SIM_ASAN)/%.so.1
	ln -sf $(notdir $<) $@

SIM_TESTS := $(patsubst $(SIM_DIR)/tests/%.c,$(SIM_ASAN)/%,$(wildcard $(SIM_DIR)/tests/test_*.c))
SIM_TEST_LIBS := $(SIM_ASAN)/libcuda.so $(SIM_ASAN)/libnvidia-ml.so
.SECONDARY: $(SIM_TEST_LIBS) $(SIM_TESTS)

$(SIM_ASAN)/test_%: $(SIM_DIR)/tests/test_%.c $(SIM_DIR)/tests/testutil.h $(SIM_HDRS) $(SIM_TEST_LIBS)
	$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) -I$(SIM_DIR)/src -o $@ $< $(addprefix $(SIM_DIR)/src/,$(SIM_COMMON)) \
		-L$(SIM_ASAN) -Wl,-rpath,'$$ORIGIN' -lcuda -lnvidia-ml -ldl -pthread

.PHONY: test-sim sim
sim: $(SIM_LIBS)

test-sim: $(SIM_LIBS) $(SIM_TESTS)
	@set -e; for t in $(SIM_TESTS); do echo "--- $$t"; \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
		SIM_RELEASE_LIB_DIR=$(abspath $(SIM_BIN)) $$t; done

# Not a test: prints the simulator's own per-call costs (the baseline for hook overheads).
.PHONY: bench-sim
$(BUILD)/sim/bench_sim: $(SIM_DIR)/bench/bench_sim.c $(SIM_HDRS) $(SIM_BIN)/libcuda.so
	mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -I$(SIM_DIR)/src -o $@ $< -L$(SIM_BIN) -Wl,-rpath,'$$ORIGIN/../../$(SIM_BIN)' -lcuda -pthread
bench-sim: $(BUILD)/sim/bench_sim
	$(BUILD)/sim/bench_sim

# gpuslice-sim-ctl: injects faults into a running simulation (XID events, lost GPUs).
SIM_CTL_SRC := $(SIM_DIR)/ctl/sim_ctl.c $(addprefix $(SIM_DIR)/src/,$(SIM_COMMON))
ALL_TARGETS += $(SIM_BIN)/gpuslice-sim-ctl
$(SIM_BIN)/gpuslice-sim-ctl: $(SIM_CTL_SRC) $(SIM_HDRS) | $(SIM_BIN)
	$(CC) $(CFLAGS_COMMON) -I$(SIM_DIR)/src -o $@ $(SIM_CTL_SRC) -pthread
$(SIM_ASAN)/gpuslice-sim-ctl: $(SIM_CTL_SRC) $(SIM_HDRS) | $(SIM_ASAN)
	$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) -I$(SIM_DIR)/src -o $@ $(SIM_CTL_SRC) -pthread
# test_events and test_mig run the sanitizer build of the tool next to them.
$(SIM_ASAN)/test_events $(SIM_ASAN)/test_mig: $(SIM_ASAN)/gpuslice-sim-ctl
