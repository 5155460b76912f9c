# Node agent: gpuslice-node (node daemon + device plugin + GPU hot-plug reconciler)
# and its end-to-end test on a real kubelet/containerd/runc (e2e-hotplug).
# Unit and root tests of internal/{devices,hotplug,deviceplugin,resize,agent}
# run in test-go (root-only ones skip with a reason elsewhere).
AGENT_GO_SOURCES := $(shell find cmd/gpuslice-node internal/agent internal/deviceplugin internal/hotplug internal/devices internal/resize internal/node internal/group internal/gpu pkg/api -name '*.go' -not -name '*_test.go' 2>/dev/null) go.mod go.sum
ALL_TARGETS += $(BIN)/gpuslice-node

$(BIN)/gpuslice-node: $(AGENT_GO_SOURCES)
	@mkdir -p $(BIN)
	$(GO) build -o $@ ./cmd/gpuslice-node

.PHONY: kubelet-bin e2e-hotplug
# The real kubelet, built from source and cached by version.
kubelet-bin:
	test/node-e2e/build-kubelet.sh

# Real etcd + kube-apiserver + gpuslice-scheduler + kubelet + containerd + runc on this machine (root):
# pod hand-off, resize 1->3->2 and 2->4 on a short node, agent killed mid-resize.
# Last line: "hotplug p50 X ms, p99 Y ms, resizes N".
E2E_HOTPLUG_RESIZES ?= 40
e2e-hotplug: all k8s-bins kubelet-bin
	GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_K8S_BIN=$(K8S_BIN_DIR) \
	  GPUSLICE_KUBELET=$(or $(GPUSLICE_CACHE),$(HOME)/.cache/gpuslice)/k8s/v1.35.4/node/kubelet \
	  GPUSLICE_E2E_RESIZES=$(E2E_HOTPLUG_RESIZES) \
	  $(GO) test -tags nodee2e -count=1 -timeout 30m -v -run 'TestHotplug' ./test/node-e2e/ 2>&1 | tee $(BUILD)/e2e-hotplug.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|hotplug |\s+e2e)' ; \
	  test $${PIPESTATUS[0]} -eq 0 && tail -n 1 $(BUILD)/e2e-hotplug.summary
