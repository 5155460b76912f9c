# make test-reliability (in `make test`): the tests that prove node enforcement
# holds under misuse and faults, one class each (docs/contracts.md, "Memory
# accounting"): the group's count is what the driver really holds on every
# allocation path.
TEST_TARGETS += test-reliability

.PHONY: test-reliability
test-reliability: test-reliability-lib
