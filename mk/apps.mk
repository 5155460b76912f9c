# apps/: small CUDA driver-API programs (run on the simulated GPU and on a real driver).
APPS_COMMON := apps/cuapi.c apps/cuapi.h include/gpuslice/cuda_abi.h
APPS := $(BIN)/gs-trainer $(BIN)/gs-memfill $(BIN)/gs-bench-hooks $(BIN)/gs-share-tenant $(BIN)/gs-elastic
ALL_TARGETS += $(APPS)

$(BIN)/gs-%: apps/%.c $(APPS_COMMON)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_COMMON) -fPIE -o $@ $< apps/cuapi.c -ldl

$(BIN)/gs-bench-hooks: apps/bench_hooks.c $(APPS_COMMON)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_COMMON) -fPIE -o $@ $< apps/cuapi.c -ldl

.PHONY: bench-hooks
# Hooked vs direct driver calls, side by side in one run (simulated GPU unless a driver is present).
bench-hooks: $(BIN)/gs-bench-hooks $(BIN)/libgpuslice.so $(BIN)/sim/libcuda.so.1
	LD_LIBRARY_PATH=$(if $(wildcard /usr/lib/x86_64-linux-gnu/libcuda.so.1),,$(abspath $(BIN)/sim)) \
		$(BIN)/gs-bench-hooks $(abspath $(BIN)/libgpuslice.so) 2000
