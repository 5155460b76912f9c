#!/usr/bin/env bash
# Regenerates the API machinery in the checkout in the current directory (`make generate`;
# `make verify-generate` runs it in a scratch copy and compares):
#   controller-gen: deploy/crds and the deep copies of pkg/apis and internal/sched/apis;
#   client-gen, lister-gen, informer-gen: the typed clientset, listers and informers of
#   pkg/apis/gpuslice/* under pkg/generated (replaced as a whole).
# The generators come from hack/codegen/build.sh (built through the Go module proxy, cached by version).
set -euo pipefail

tools="$(hack/codegen/build.sh | tail -1)"
module=github.com/gpuslice/gpuslice
header=hack/codegen/boilerplate.go.txt
# The served versions get a client (v1alpha1 is unserved: CRD schema and deep copies only).
apis=(pkg/apis/gpuslice/v1alpha2)
inputs=()
for a in "${apis[@]}"; do inputs+=("$module/$a"); done

"$tools/controller-gen" object:headerFile="$header" paths=./pkg/apis/... paths=./internal/sched/apis/... \
	crd:crdVersions=v1 output:crd:dir=deploy/crds
rm -rf pkg/generated
client_inputs=()
for i in "${inputs[@]}"; do client_inputs+=(--input "$i"); done
"$tools/client-gen" --go-header-file "$header" --clientset-name versioned --input-base "" "${client_inputs[@]}" \
	--output-dir pkg/generated/clientset --output-pkg "$module/pkg/generated/clientset"
"$tools/lister-gen" --go-header-file "$header" \
	--output-dir pkg/generated/listers --output-pkg "$module/pkg/generated/listers" "${inputs[@]}"
"$tools/informer-gen" --go-header-file "$header" \
	--output-dir pkg/generated/informers --output-pkg "$module/pkg/generated/informers" \
	--versioned-clientset-package "$module/pkg/generated/clientset/versioned" \
	--listers-package "$module/pkg/generated/listers" "${inputs[@]}"
