# make test-reliability (in `make test`): the tests that prove node enforcement
# holds under misuse and faults, one class each (docs/contracts.md, "Memory
# accounting"): the group's count is what the driver really holds on every
# allocation path (reliability_mem_test), under random sequences from several
# threads and processes (reliability_prop_test: its last line gives the steps
# checked and the samples over the limit); the limit belongs to the group
# (reliability_mem_test, TestGroupLimit*); the node daemon against hostile local
# clients (connection floods, made-up GPUs, huge setting files), identity from the
# kernel, a killed daemon coming back (TestReliability*; docs/node.md, "Bounds" and
# "Supervision").
TEST_TARGETS += test-reliability
RELIABILITY_GO_TESTS := ^TestGroupLimit|^TestGroupState|^TestReliability

.PHONY: test-reliability
test-reliability: test-reliability-lib $(BIN)/libgpuslice.so $(BIN)/sim/libcuda.so.1 $(BIN)/sim/libnvidia-ml.so.1
	GPUSLICE_BIN=$(abspath $(BIN)) $(GO) test -count=1 -run '$(RELIABILITY_GO_TESTS)' ./internal/node/
	$(GO) test -count=1 -run 'TooLarge|BoundedQuote' ./internal/group/
