# make e2e-operate: what an operator relies on, on the real kubelet (test/node-e2e TestOperate, root; skips
# otherwise): /metrics against `gpuslice status` and the GPUNode row, the CDI spec against the GPUs and a
# container's view, an injected XID withdrawing its GPU. Last line: "metrics N series checked, cdi N devices,
# unhealthy GPU withdrawn in X ms" (also build/e2e-operate.summary); full log build/e2e-operate.log.
TEST_TARGETS += e2e-operate

.PHONY: e2e-operate
e2e-operate: all kubelet-bin
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/e2e-operate.summary
	@GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_K8S_BIN=$(AGENT_K8S_DIR) GPUSLICE_KUBELET=$(AGENT_K8S_DIR)/node/kubelet \
	  GPUSLICE_E2E_OPERATE_SUMMARY=$(abspath $(BUILD))/e2e-operate.summary \
	  $(GO) test -tags nodee2e -count=1 -timeout 15m -v -run '^TestOperate$$' ./test/node-e2e/ >$(BUILD)/e2e-operate.log 2>&1; \
	  rc=$$?; grep -E '^\s*(--- |e2e|.*_test\.go:[0-9]+: )|SKIP|FAIL' $(BUILD)/e2e-operate.log | grep -v '^I[0-9]' ; \
	  test $$rc -eq 0 || { echo "e2e-operate failed; log: $(BUILD)/e2e-operate.log"; exit 1; }
	@if [ -f $(BUILD)/e2e-operate.summary ]; then tail -n 1 $(BUILD)/e2e-operate.summary; fi
