# make test-reliability (in `make test`): the tests that prove node enforcement
# holds under misuse and faults, one class each (docs/contracts.md, "Memory
# accounting"): the group's count is what the driver really holds on every
# allocation path (reliability_mem_test), under random sequences from several
# threads and processes (reliability_prop_test: its last line gives the steps
# checked and the samples over the limit); the limit belongs to the group
# (reliability_mem_test, TestGroupLimit*); the time-slice daemon against hostile local
# clients (connection floods, made-up GPUs, huge setting files, FIFOs and links in group directories), identity from the
# kernel, one daemon per run directory (another socket, a replaced directory), a lost socket or run directory made again
# (tenants stay gated, groups restored), connections' threads given back, a directory where a setting file belongs,
# and one state per group (a run directory replaced or removed under live members), dead members of another pid namespace without a host pid reaped
# (TestReliabilityReapOtherPIDNamespace), a killed daemon coming back, time slices that strand no member (a sibling's
# expired grant, wall-clock steps, ON_LOSS=wait, 300 processes started at once with
# GPUSLICE_NODE_MANY=300, which go test ./... skips) (TestReliability*; docs/timeslice.md,
# "Bounds" and "Supervision").
TEST_TARGETS += test-reliability
RELIABILITY_GO_TESTS := ^TestGroupLimit|^TestGroupState|^TestReliability

.PHONY: test-reliability
test-reliability: test-reliability-lib $(BIN)/libgpuslice.so $(BIN)/sim/libcuda.so.1 $(BIN)/sim/libnvidia-ml.so.1
	GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_NODE_MANY=300 $(GO) test -count=1 -run '$(RELIABILITY_GO_TESTS)' $(TIMESLICE_E2E)
	$(GO) test -count=1 -run '^TestGroupLimit' ./internal/groupstate/ ./internal/groupmgr/
	$(GO) test -count=1 -run 'TooLarge|BoundedQuote|NotRegular|ModeNotThroughLink' ./internal/group/
	$(GO) test -count=1 -run 'TestRemoveGroupDir|TestPrepareRunUnsafeRunDir' ./internal/runner/

.PHONY: bench-reliability
# Figures for docs/benchmarks.md: grant round trips idle vs during a 10,000-connection flood from one
# user (root: the flood runs as nobody), and kill -9 of the daemon under `gpuslice run` -> a new daemon
# answering -> the tenant's gate connected to it again (5 kills); shares per window of granted time for
# 2/4/8 tenants (BenchmarkE2EShareWindows).
bench-reliability: all
	GPUSLICE_BIN=$(abspath $(BIN)) $(GO) test -run '^$$' -bench 'ConnFlood|DaemonKillRecovery|E2EShareWindows' -benchtime 1x \
		$(TIMESLICE_E2E) 2>&1 | grep -v '^[IE][0-9]'; exit $${PIPESTATUS[0]}
