# Cluster scheduling: gpuslice-scheduler, gpuslice-publisher, kubectl-gpuslice, the real
# Kubernetes binaries they are tested against, integration tests, benchmark.
# bin/gpuslice-scheduler, bin/gpuslice-publisher and bin/kubectl-gpuslice are built by mk/go.mk (every cmd/<name>).
K8S_BIN_DIR := $(K8S_DIR)
TEST_TARGETS += test-cluster

.PHONY: k8s-bins test-cluster test-cluster-unit bench-scheduler bench-dra-state
# kube-apiserver, etcd, kube-scheduler, kubectl, kwok built from source, cached by version.
k8s-bins:
	hack/k8s/build.sh

test-cluster-unit:
	$(GO) test -count=1 ./pkg/... ./internal/alloc/... ./internal/sched/... ./internal/gpunoderow/...

# Integration tests on a real apiserver/etcd/scheduler (modest scale, a few minutes).
# If the Kubernetes binaries cannot be built here, the tests skip with the reason; with
# GPUSLICE_INTEGRATION_REQUIRED=1 (CI sets it: .ci/run) that is a failure instead.
test-cluster: $(BIN)/gpuslice-scheduler $(BIN)/gpuslice-publisher $(BIN)/kubectl-gpuslice test-cluster-unit
	@hack/k8s/build.sh || { if [ "$$GPUSLICE_INTEGRATION_REQUIRED" = 1 ]; then \
	  echo "gpuslice: Kubernetes binaries could not be built (GPUSLICE_INTEGRATION_REQUIRED=1): integration tests fail"; exit 1; fi; \
	  echo "gpuslice: WARNING: Kubernetes binaries could not be built; integration tests will skip"; }
	$(GO) vet -tags integration ./test/integration/...
	GPUSLICE_K8S_BIN=$(K8S_BIN_DIR) GPUSLICE_SCHEDULER=$(abspath $(BIN)/gpuslice-scheduler) GPUSLICE_PUBLISHER=$(abspath $(BIN)/gpuslice-publisher) \
	  GPUSLICE_KUBECTL_PLUGIN=$(abspath $(BIN)/kubectl-gpuslice) \
	  $(GO) test -tags integration -count=1 -timeout 20m ./test/integration/...

# Ours vs stock kube-scheduler on KWOK nodes; the last line is the summary.
BENCH_SCALES ?= 1000 5000
BENCH_PODS ?= 3000
# BENCH_PREEMPT_RATES="5 10 20 40": the preemption phase's sustained-rate sweep (off by default).
BENCH_PREEMPT_RATES ?=
bench-scheduler: k8s-bins $(BIN)/gpuslice-scheduler
	GPUSLICE_K8S_BIN=$(K8S_BIN_DIR) $(GO) run ./test/integration/bench \
	  -scheduler $(abspath $(BIN)/gpuslice-scheduler) -nodes "$(BENCH_SCALES)" -pods $(BENCH_PODS) \
	  $(if $(BENCH_PREEMPT_RATES),-preempt-rates "$(BENCH_PREEMPT_RATES)")

# A nominated DRA pod's allocated state read for its node alone against the claim tracker's whole state,
# side by side on full clusters of 100 and 1,000 nodes (kube-scheduler's claim tracker; docs/benchmarks.md).
bench-dra-state:
	$(GO) test -run XXX -bench 'NomineeState|FirstTry' -benchtime 200x -count 3 ./internal/sched/
