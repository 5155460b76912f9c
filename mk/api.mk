# Generated API machinery: the GPUNode CRD (deploy/crds, linked into the Helm
# chart) and the deep copies of pkg/api and of the scheduler plugin's args
# (internal/sched/apis), from the kubebuilder markers in
# those packages, by controller-gen at a pinned version (run through the Go module proxy).
CONTROLLER_GEN_VERSION := v0.20.1
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
API_GEN_ARGS = object paths=./pkg/api/... paths=./internal/sched/apis/... crd:crdVersions=v1 output:crd:dir=$(1)
TEST_TARGETS += verify-generate

.PHONY: generate verify-generate
# Rewrites the zz_generated.deepcopy.go files and deploy/crds (review the diff).
generate:
	$(CONTROLLER_GEN) $(call API_GEN_ARGS,deploy/crds)

# Fails when the generated files are stale: generates into a scratch copy and compares.
verify-generate:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && cp -a go.mod go.sum pkg $$tmp/ && \
	  mkdir -p $$tmp/internal/sched && cp -a internal/sched/apis $$tmp/internal/sched/ && \
	  (cd $$tmp && $(CONTROLLER_GEN) $(call API_GEN_ARGS,$$tmp/crds)) && \
	  for f in pkg/api internal/sched/apis/config internal/sched/apis/config/v1; do \
	    diff -u $$f/zz_generated.deepcopy.go $$tmp/$$f/zz_generated.deepcopy.go || { echo "generated files are stale: run make generate"; exit 1; }; done && \
	  diff -ru deploy/crds $$tmp/crds || { echo "generated files are stale: run make generate"; exit 1; }
