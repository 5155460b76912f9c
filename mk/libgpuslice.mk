# libgpuslice/: the interception library bin/libgpuslice.so and its tests (test-lib).
LIB_DIR := libgpuslice
LIB_SRCS := $(sort $(wildcard $(LIB_DIR)/src/*.c))
LIB_DEPS := $(LIB_SRCS) $(wildcard $(LIB_DIR)/src/*.h $(LIB_DIR)/src/*.def $(LIB_DIR)/include/gpuslice/*.h) \
	include/gpuslice/cuda_abi.h include/gpuslice/nvml_abi.h include/gpuslice/proto.h
LIB_MAP := $(BUILD)/libgpuslice/exports.map
# -foptimize-sibling-calls: dlsym/dlvsym pass through as tail calls (also at -O1). -flto: the allocation
# hooks' path crosses several files (group, accounting, pointer table); inlined across them it costs ~12 ns
# less per cuMemAlloc+cuMemFree pair (make bench-hooks). -fno-crossjumping: each gate state of a launch hook
# keeps its own tail call (hooks_launch.c; ~3 ns per held launch, make bench-gate-cost).
LIB_CFLAGS = -I$(LIB_DIR)/include -foptimize-sibling-calls -fno-crossjumping -flto=auto
LIB_LDFLAGS = -flto=auto -shared -Wl,-Bsymbolic -Wl,--version-script=$(LIB_MAP) -Wl,-z,now -Wl,-z,relro \
	-Wl,--no-undefined -ldl -lpthread
LIB_ASAN := $(BUILD)/asan/libgpuslice.so
ALL_TARGETS += $(BIN)/libgpuslice.so
TEST_TARGETS += test-lib

$(LIB_MAP): $(LIB_DIR)/src/exports.map.in $(LIB_DIR)/src/hooks.def
	@mkdir -p $(dir $@)
	$(CC) -E -P -x c -I$(LIB_DIR)/src -o $@ $<

$(BIN)/libgpuslice.so: $(LIB_DEPS) $(LIB_MAP)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_COMMON) $(LIB_CFLAGS) -o $@ $(LIB_SRCS) $(LIB_LDFLAGS)

$(LIB_ASAN): $(LIB_DEPS) $(LIB_MAP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) $(LIB_CFLAGS) -o $@ $(LIB_SRCS) $(LIB_LDFLAGS)

# The node's context probe (probe/ctxprobe.c): run by the time-slice daemon, never preloaded.
LIB_PROBE := $(BIN)/gpuslice-ctxprobe
ALL_TARGETS += $(LIB_PROBE)
$(LIB_PROBE): $(LIB_DIR)/probe/ctxprobe.c include/gpuslice/cuda_abi.h include/gpuslice/nvml_abi.h
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_COMMON) -o $@ $< -ldl

include $(LIB_DIR)/tests/tests.mk
