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
images: $(BIN)/gpuslice-scheduler $(BIN)/gpuslice-node $(BIN)/gpuslice $(BIN)/libgpuslice.so $(BIN)/gpuslice-ctxprobe
	$(GO) run ./hack/images -bin $(BIN) -version $(VERSION) -tag $(IMAGE_TAG) -out $(BUILD)/images

# helm lint and helm template against the golden renderings in test/helm/testdata.
test-helm: helm-bin
	GPUSLICE_HELM=$(HELM) $(GO) test -tags helmchart -count=1 ./test/helm/

# Rewrites the golden renderings (review the diff).
helm-golden: helm-bin
	GPUSLICE_HELM=$(HELM) $(GO) test -tags helmchart -count=1 -run TestTemplateGolden ./test/helm/ -update

# Helm end to end (root; skips otherwise): real etcd + kube-apiserver (ServiceAccount tokens, RBAC)
# + kube-controller-manager + kube-scheduler + kubelet + containerd + runc; the images built twice
# (tags e2e-1, e2e-2) and imported into containerd; helm install / upgrade / uninstall of the chart
# with test/helm/testdata/e2e.values.yaml (the simulated GPU). Last line:
# "helm install ready in <s> s, upgrade kept <n>/<n> pods, uninstall left <k> objects".
E2E_HELM := $(BUILD)/e2e-helm
TEST_TARGETS += e2e-helm
.PHONY: e2e-helm
e2e-helm: all kubelet-bin helm-bin
	@test/node-e2e/build-kubelet.sh kube-controller-manager >/dev/null
	@rm -rf $(E2E_HELM); mkdir -p $(E2E_HELM)
	@for tag in e2e-1 e2e-2; do $(GO) run ./hack/images -bin $(BIN) -version $(VERSION) -registry gpuslice.local \
	  -tag $$tag -out $(E2E_HELM)/images/$$tag || exit 1; done
	@GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_K8S_BIN=$(AGENT_K8S_DIR) GPUSLICE_KUBELET=$(AGENT_K8S_DIR)/node/kubelet \
	  GPUSLICE_KCM=$(AGENT_K8S_DIR)/node/kube-controller-manager GPUSLICE_HELM=$(HELM) \
	  GPUSLICE_IMAGES=$(abspath $(E2E_HELM))/images GPUSLICE_E2E_SUMMARY=$(abspath $(E2E_HELM))/summary \
	  $(GO) test -tags nodee2e -count=1 -timeout 20m -v -run '^TestHelm$$' ./test/node-e2e/ >$(E2E_HELM)/e2e-helm.log 2>&1; \
	  rc=$$?; grep -E '^\s*(--- |e2e|.*\.go:[0-9]+: )|SKIP|FAIL' $(E2E_HELM)/e2e-helm.log | grep -v '^I[0-9]'; \
	  test $$rc -eq 0 || { echo "helm e2e failed; log: $(E2E_HELM)/e2e-helm.log"; exit 1; }
	@if [ -f $(E2E_HELM)/summary ]; then tail -n 1 $(E2E_HELM)/summary; fi
