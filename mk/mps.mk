# MPS sharing mode. The simulator's stand-in MPS control daemon + server
# (bin/sim/gpuslice-sim-mps-control, a simulator part like bin/sim/libcuda.so.1)
# and `make bench-mps`. Its C tests run in `make test-sim` (test_mps.c).
MPS_SIM_SRC := simgpu/mps/mps_control.c
MPS_SIM_HDRS := simgpu/src/mps_table.h include/gpuslice/cuda_abi.h
MPS_SIM_CFLAGS := -Isimgpu/src

ALL_TARGETS += $(BIN)/sim/gpuslice-sim-mps-control

$(BIN)/sim/gpuslice-sim-mps-control: $(MPS_SIM_SRC) $(MPS_SIM_HDRS)
	mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(MPS_SIM_CFLAGS) -o $@ $(MPS_SIM_SRC)

$(BUILD)/asan/sim/gpuslice-sim-mps-control: $(MPS_SIM_SRC) $(MPS_SIM_HDRS)
	mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) $(MPS_SIM_CFLAGS) -o $@ $(MPS_SIM_SRC)

# test_mps runs the sanitizer build of the stand-in daemon next to it.
$(BUILD)/asan/sim/test_mps: $(BUILD)/asan/sim/gpuslice-sim-mps-control

.PHONY: bench-mps
# Time slices vs MPS side by side in one run (simulated GPU unless a driver is present); last line is a contract.
bench-mps: $(BIN)/gpuslice $(BIN)/gs-share-tenant $(BIN)/libgpuslice.so $(SIM_LIBS) $(BIN)/sim/gpuslice-sim-mps-control
	$(GO) run ./test/mpsbench --bin $(BIN)

$(BIN)/gs-share-tenant: apps/share_tenant.c $(APPS_COMMON)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_COMMON) -fPIE -o $@ $< apps/cuapi.c -ldl
