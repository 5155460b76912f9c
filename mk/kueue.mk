# Teams and quotas: Kueue's controller manager, built from source through the Go module proxy in
# its own module (hack/kueue/build.sh, version in hack/kueue/version), cached by version in
# ~/.cache/gpuslice/kueue/<version>/ with its CRDs; and its end to end on the real kubelet
# (test/node-e2e TestKueue, root; skips otherwise): two teams' ClusterQueues in one cohort, 100 Jobs
# of quarter and half GPUs in bursts, borrowing, reclaim, preemption, quotas checked from the API,
# group limits on the node, bad input. Last line
# "kueue: <n> jobs admitted, quota exceeded 0 times, borrowed <b>, reclaimed <r>, preempted <p>, limits held <k>/<k>"
# (build/e2e-kueue.summary); full log build/e2e-kueue.log.
TEST_TARGETS += e2e-kueue

.PHONY: kueue-bin e2e-kueue
kueue-bin:
	hack/kueue/build.sh >/dev/null

e2e-kueue: all kubelet-bin kueue-bin
	@test/node-e2e/build-kubelet.sh kube-controller-manager >/dev/null
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/e2e-kueue.summary
	@GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_K8S_BIN=$(AGENT_K8S_DIR) GPUSLICE_KUBELET=$(AGENT_K8S_DIR)/node/kubelet \
	  GPUSLICE_KCM=$(AGENT_K8S_DIR)/node/kube-controller-manager GPUSLICE_KUEUE=$$(hack/kueue/build.sh) \
	  GPUSLICE_E2E_SUMMARY=$(abspath $(BUILD))/e2e-kueue.summary \
	  $(GO) test -tags nodee2e -count=1 -timeout 20m -v -run '^TestKueue$$' ./test/node-e2e/ >$(BUILD)/e2e-kueue.log 2>&1; \
	  rc=$$?; grep -E '^\s*(--- |e2e|node-e2e|.*\.go:[0-9]+: )|SKIP|FAIL' $(BUILD)/e2e-kueue.log | grep -v '^I[0-9]' ; \
	  test $$rc -eq 0 || { echo "kueue e2e failed; log: $(BUILD)/e2e-kueue.log"; exit 1; }
	@if [ -f $(BUILD)/e2e-kueue.summary ]; then tail -n 1 $(BUILD)/e2e-kueue.summary; fi
