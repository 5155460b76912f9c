# Node agent: gpuslice-node (time-slice daemon + device plugin + GPU hot-plug reconciler)
# and its end-to-end test on a real kubelet/containerd/runc.
# Unit and root tests of internal/{hotplug,deviceplugin,resize,agent}
# run in test-go (root-only ones skip with a reason elsewhere).
# bin/gpuslice-node is built by mk/go.mk (every cmd/<name>).
AGENT_K8S_DIR := $(K8S_DIR)
TEST_TARGETS += test-node-e2e e2e-pod-shares e2e-mps

.PHONY: kubelet-bin e2e-hotplug test-node-e2e e2e-pod-shares e2e-mps
# The real kubelet (test/node-e2e/build-kubelet.sh) and the control-plane
# binaries (hack/k8s/build.sh), built from source and cached by version.
kubelet-bin:
	hack/k8s/build.sh >/dev/null
	test/node-e2e/build-kubelet.sh >/dev/null

# Real etcd + kube-apiserver + gpuslice-scheduler + kubelet + containerd + runc on
# this machine (root; skips otherwise): a GPU-share pod, resize 1->3->2 and 2->4 on a
# short node (partial grant + Event), E2E_HOTPLUG_RESIZES timed resizes, the agent
# killed mid-resize. Ends with "hotplug p50 X ms, p99 Y ms, resizes N".
E2E_HOTPLUG_RESIZES ?= 200
define run_node_e2e
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/e2e-hotplug.summary
	@GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_K8S_BIN=$(AGENT_K8S_DIR) GPUSLICE_KUBELET=$(AGENT_K8S_DIR)/node/kubelet \
	  GPUSLICE_E2E_RESIZES=$(1) GPUSLICE_E2E_SUMMARY=$(abspath $(BUILD))/e2e-hotplug.summary \
	  $(GO) test -tags nodee2e -count=1 -timeout 25m -v -run '^TestHotplug$$' ./test/node-e2e/ >$(BUILD)/e2e-hotplug.log 2>&1; \
	  rc=$$?; grep -E '^\s*(--- |e2e|node-e2e|hotplug_test|.*\.go:[0-9]+: )|SKIP|FAIL' $(BUILD)/e2e-hotplug.log | grep -v '^I[0-9]' ; \
	  test $$rc -eq 0 || { echo "node e2e failed; log: $(BUILD)/e2e-hotplug.log"; exit 1; }
	@if [ -f $(BUILD)/e2e-hotplug.summary ]; then tail -n 1 $(BUILD)/e2e-hotplug.summary; fi
endef

e2e-hotplug: all kubelet-bin
	$(call run_node_e2e,$(E2E_HOTPLUG_RESIZES))

# The same end to end with fewer timed resizes (about a minute once built).
test-node-e2e: all kubelet-bin
	$(call run_node_e2e,40)

# The same real node (root; skips otherwise): pods of 25 and 75 gpuslice.io/gpu-units
# on one GPU running busy kernels (shares of the daemon's granted time within 5 points, their
# kernels' work past their grants within the gate's queue bound), a process started without
# GPUSLICE_GROUP_FILE counted in its container's group, gpuslice.io/units 25 -> 50 refused
# while the GPU is full, then applied live (timed), a pod that fits nowhere and a
# pod on a Draining node left Pending with the reason, an online pod beside three
# offline ones, a preempted pod's memory, GPU time and units freed as soon as its containers stop,
# a burst of 40 pods of one share created at once (half exiting at once) all admitted with their own groups.
# Last, pods with the simulator's realistic 300 MiB contexts: the context counted in memory.current and
# gpuslice status, a pod whose limit cannot hold context + allocation refused with the one-line reason.
# Ends with "pod shares 25/75: <a>% / <b>%, change 25->50 enforced in <ms> ms".
e2e-pod-shares: all kubelet-bin
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/e2e-pod-shares.summary
	@GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_K8S_BIN=$(AGENT_K8S_DIR) GPUSLICE_KUBELET=$(AGENT_K8S_DIR)/node/kubelet \
	  GPUSLICE_E2E_SUMMARY=$(abspath $(BUILD))/e2e-pod-shares.summary \
	  $(GO) test -tags nodee2e -count=1 -timeout 25m -v -run '^TestPodShares$$' ./test/node-e2e/ >$(BUILD)/e2e-pod-shares.log 2>&1; \
	  rc=$$?; grep -E '^\s*(--- |e2e|node-e2e|.*\.go:[0-9]+: )|SKIP|FAIL' $(BUILD)/e2e-pod-shares.log | grep -v '^I[0-9]' ; \
	  test $$rc -eq 0 || { echo "pod shares e2e failed; log: $(BUILD)/e2e-pod-shares.log"; exit 1; }
	@if [ -f $(BUILD)/e2e-pod-shares.summary ]; then tail -n 1 $(BUILD)/e2e-pod-shares.summary; fi

# The same real node (root; skips otherwise) with GPU 0 in mps mode: a pod of 25
# units runs as MPS clients of the agent's daemon (environment, pipe directory,
# libgpuslice's hard limit, NVML's process list in the pod), the GPUNode row
# counts its clients and units; a killed MPS server is restarted by the agent and
# the pod's next client works (about a minute once built).
e2e-mps: all kubelet-bin
	@mkdir -p $(BUILD)
	@GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_K8S_BIN=$(AGENT_K8S_DIR) GPUSLICE_KUBELET=$(AGENT_K8S_DIR)/node/kubelet \
	  $(GO) test -tags nodee2e -count=1 -timeout 25m -v -run '^TestMPS$$' ./test/node-e2e/ >$(BUILD)/e2e-mps.log 2>&1; \
	  rc=$$?; grep -E '^\s*(--- |e2e|node-e2e|.*\.go:[0-9]+: )|SKIP|FAIL' $(BUILD)/e2e-mps.log | grep -v '^I[0-9]' ; \
	  test $$rc -eq 0 || { echo "mps e2e failed; log: $(BUILD)/e2e-mps.log"; exit 1; }
