# apps/: small CUDA driver-API programs (run on the simulated GPU and on a real driver).
APPS_COMMON := apps/cuapi.c apps/cuapi.h include/gpuslice/cuda_abi.h
APPS := $(BIN)/gs-trainer $(BIN)/gs-memfill $(BIN)/gs-bench-hooks $(BIN)/gs-share-tenant $(BIN)/gs-elastic
ALL_TARGETS += $(APPS)

$(BIN)/gs-%: apps/%.c $(APPS_COMMON)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_COMMON) -fPIE -o $@ $< apps/cuapi.c -ldl

$(BIN)/gs-bench-hooks: apps/bench_hooks.c apps/bench_work.c apps/bench_work.h $(APPS_COMMON)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_COMMON) -fPIE -o $@ $< apps/bench_work.c apps/cuapi.c -ldl

.PHONY: bench-hooks
# Hooked vs direct driver calls per gate state (off, no daemon, grant held: unbounded, count bound, default),
# side by side in one run each, a launch-bound workload's and a shortest-kernel stream's throughput (simulated
# GPU unless a driver is present), then `gpuslice run` start-up over /bin/true (daemon running / started by the
# run). The last line: launch x<r> (default gate, grant held), launch-bound throughput x<r>, alloc+free x<r>,
# shortest-kernel stream x<r>.
bench-hooks: $(BIN)/gs-bench-hooks $(BIN)/libgpuslice.so $(BIN)/gpuslice $(BIN)/sim/libcuda.so.1 $(BIN)/sim/libnvidia-ml.so.1
	LD_LIBRARY_PATH=$(if $(wildcard /usr/lib/x86_64-linux-gnu/libcuda.so.1),,$(abspath $(BIN)/sim)) \
		apps/bench_hooks.sh $(BIN) 2000 31
