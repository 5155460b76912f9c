# Installing gpuslice on a cluster: the Helm chart deploy/helm/gpuslice, the
# images (deploy/docker/*.Dockerfile; built here without a container engine by
# hack/images), and helm itself, built from source and cached by version.
HELM_VERSION := v3.19.2
HELM := $(or $(GPUSLICE_CACHE),$(HOME)/.cache/gpuslice)/helm/$(HELM_VERSION)/helm
IMAGE_TAG ?= $(VERSION)
TEST_TARGETS += test-helm

.PHONY: helm-bin images test-helm helm-golden
helm-bin:
	HELM_VERSION=$(HELM_VERSION) hack/helm/build.sh >/dev/null

# OCI archives of both images in build/images (import with ctr -n k8s.io images import).
images: $(BIN)/gpuslice-scheduler $(BIN)/gpuslice-node $(BIN)/gpuslice $(BIN)/libgpuslice.so
	$(GO) run ./hack/images -bin $(BIN) -version $(VERSION) -tag $(IMAGE_TAG) -out $(BUILD)/images

# helm lint and helm template against the golden renderings in test/helm/testdata.
test-helm: helm-bin
	GPUSLICE_HELM=$(HELM) $(GO) test -tags helmchart -count=1 ./test/helm/

# Rewrites the golden renderings (review the diff).
helm-golden: helm-bin
	GPUSLICE_HELM=$(HELM) $(GO) test -tags helmchart -count=1 -run TestTemplateGolden ./test/helm/ -update
