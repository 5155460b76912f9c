# make test-reliability (in `make test`): the tests that prove node enforcement
# holds under misuse and faults, one class each (docs/contracts.md, "Memory
# accounting"): the group's count is what the driver really holds on every
# allocation path (reliability_mem_test), under random sequences from several
# threads and processes (reliability_prop_test: its last line gives the steps
# checked and the samples over the limit); the limit belongs to the group
# (reliability_mem_test, TestGroupLimit*).
TEST_TARGETS += test-reliability
RELIABILITY_GO_TESTS := ^TestGroupLimit

.PHONY: test-reliability
test-reliability: test-reliability-lib
	$(GO) test -count=1 -run '$(RELIABILITY_GO_TESTS)' ./internal/node/
