# Generated API machinery, from the markers in pkg/apis/gpuslice/* and internal/sched/apis:
# the GPUNode CRD (deploy/crds, linked into the Helm chart), the deep copies, and the typed
# GPUNode clientset, listers and informers (pkg/generated), by controller-gen and
# k8s.io/code-generator at pinned versions, built through the Go module proxy and cached by
# version (hack/codegen/build.sh; hack/codegen/generate.sh runs them).
TEST_TARGETS += verify-generate

.PHONY: generate verify-generate
# Rewrites the generated files (review the diff).
generate:
	hack/codegen/generate.sh

# Fails when the generated files are stale: generates into a scratch copy and compares.
verify-generate:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && cp -a go.mod go.sum pkg hack $$tmp/ && \
	  mkdir -p $$tmp/internal/sched $$tmp/deploy && cp -a internal/sched/apis $$tmp/internal/sched/ && \
	  cp -a deploy/crds $$tmp/deploy/ && (cd $$tmp && hack/codegen/generate.sh) && \
	  diff -ru pkg $$tmp/pkg && diff -ru internal/sched/apis $$tmp/internal/sched/apis && \
	  diff -ru deploy/crds $$tmp/deploy/crds || { echo "generated files are stale: run make generate"; exit 1; }
