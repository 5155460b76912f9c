# The DRA node end to end (test/node-e2e/dra_test.go, dra.go): gpuslice-node's DRA
# driver on the real kubelet, containerd 1.7 with CDI (test/node-e2e/build-containerd.sh:
# Debian's 1.6 has no CDI), runc, the stock kube-scheduler and kube-controller-manager's
# resource claim controller. Root; skips otherwise.
.PHONY: containerd-bin e2e-dra e2e-dra-preempt e2e-mig
TEST_TARGETS += e2e-dra e2e-mig
containerd-bin:
	test/node-e2e/build-containerd.sh >/dev/null

# First, gpuslice-scheduler as a second scheduler: a priority-1000 pod's claim preempts
# a priority-0 share of the full GPU 0 (GPUs 1-3 held whole) and runs with its memory
# limit and half of the GPU's time; the victim's claim group is gone from the node
# (testDRAPreempt, dra_preempt_test.go). Then pods from ResourceClaimTemplates of 25 and 75 units on one GPU (shares of granted time
# within 5 points, work past the grants within the queue bound, memory limits inside the containers), a claim that does not
# fit and a claim for a tainted (XID 79) GPU left Pending with the scheduler's reason, the
# agent killed between Prepare and container start, the claim shapes (a claim shared by two
# pods, two claims in two containers, two in one container refused, firstAvailable, admin
# access, device status), the agent killed at each of the driver's 8 steps (an agent built
# with -tags gpuslice_faultinject), a plain gpuslice.io/gpu pod through
# the DeviceClass mapping, a bad GPUShareConfig refused with an event naming the field;
# Ends with "dra shares 25/75: <a>% / <b>%, memory limits held <n>/<n>, prepare p99 <ms> ms".
E2E_DRA_RUN ?= ^TestDRA$$
# The log and summary files' name (build/<name>.log, build/<name>.summary).
E2E_DRA_NAME ?= e2e-dra
e2e-dra: all kubelet-bin containerd-bin helm-bin
	@test/node-e2e/build-kubelet.sh kube-controller-manager >/dev/null
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/$(E2E_DRA_NAME).summary
	@# The agent once more with the driver's fault points live (the crash-steps scenario); never shipped.
	@$(GO_BUILD) -tags gpuslice_faultinject -o $(BUILD)/gpuslice-node-faultinject ./cmd/gpuslice-node
	@GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_K8S_BIN=$(AGENT_K8S_DIR) GPUSLICE_KUBELET=$(AGENT_K8S_DIR)/node/kubelet \
	  GPUSLICE_NODE_FAULTINJECT=$(abspath $(BUILD))/gpuslice-node-faultinject GPUSLICE_HELM=$(HELM) \
	  GPUSLICE_KCM=$(AGENT_K8S_DIR)/node/kube-controller-manager \
	  GPUSLICE_CONTAINERD=$$(test/node-e2e/build-containerd.sh) \
	  GPUSLICE_E2E_SUMMARY=$(abspath $(BUILD))/$(E2E_DRA_NAME).summary \
	  $(GO) test -tags nodee2e -count=1 -timeout 25m -v -run '$(E2E_DRA_RUN)' ./test/node-e2e/ >$(BUILD)/$(E2E_DRA_NAME).log 2>&1; \
	  rc=$$?; grep -E '^\s*(--- |e2e|node-e2e|.*\.go:[0-9]+: )|SKIP|FAIL' $(BUILD)/$(E2E_DRA_NAME).log | grep -v '^I[0-9]' ; \
	  test $$rc -eq 0 || { echo "$(E2E_DRA_NAME) failed; log: $(BUILD)/$(E2E_DRA_NAME).log"; exit 1; }
	@if [ -f $(BUILD)/$(E2E_DRA_NAME).summary ]; then tail -n 1 $(BUILD)/$(E2E_DRA_NAME).summary; fi

# TestDRA's preemption step alone (TestDRAPreempt, dra_preempt_test.go), on a node of its own.
e2e-dra-preempt:
	@$(MAKE) --no-print-directory e2e-dra E2E_DRA_RUN='^TestDRAPreempt$$$$'

# MIG (test/node-e2e/mig_test.go, issue 35, docs/mig.md) on the same kind of node, its GPU one
# simulated H100 80GB in MIG mode: two pods' 3g.40gb instances made on demand, one destroyed under
# its idle pod reported (event MIGInstanceLost), both destroyed with their pods; claims of 25 and 75
# units sharing one 1g.20gb instance (granted time within 5 points, memory limits in the containers),
# a 7g.80gb claim that does not fit left Pending, the instance destroyed with the pods. Ends with
# "mig: <n> instances made by claims, shares inside one instance <a>% / <b>%, memory limits held
# <h>/<n>, claim to running p99 <ms> ms".
e2e-mig:
	@$(MAKE) --no-print-directory e2e-dra E2E_DRA_RUN='^TestMIG$$$$' E2E_DRA_NAME=e2e-mig
