# test/gpu: the real-GPU suite. `make test-gpu` on a machine with an NVIDIA driver;
# `GPUSLICE_DRIVER=sim make test-gpu` runs the same code on the simulated GPU.
# test-gpu-sim (in `make test`): the whole suite on the simulated GPU (about 2 minutes; every check
# asserts what the machine's load does not change); test-gpu-sim-quick: its memory checks only.
ALL_TARGETS += $(BIN)/gs-tenant
TEST_TARGETS += test-gpu-sim

$(BIN)/gs-tenant: test/timeslice/tenant.c $(APPS_COMMON)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_COMMON) -fPIE -o $@ $< apps/cuapi.c -ldl

.PHONY: test-gpu test-gpu-sim test-gpu-sim-quick
test-gpu: all
	GPUSLICE_BIN=$(abspath $(BIN)) $(GO) test -tags gpusuite -count=1 -timeout 60m -v -run '^TestGPU$$' ./test/gpu/ \
		| grep -vE '^\s*(=== RUN|=== PAUSE|=== CONT)' ; exit $${PIPESTATUS[0]}

test-gpu-sim-quick: all
	GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_DRIVER=sim $(GO) test -tags gpusuite -short -count=1 -timeout 10m -run '^TestGPU$$' ./test/gpu/

test-gpu-sim: all
	GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_DRIVER=sim $(GO) test -tags gpusuite -count=1 -timeout 20m -run '^TestGPU$$' ./test/gpu/
