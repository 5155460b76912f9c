# Rolling upgrades (test/upgrade, build tag upgrade): the library of one release against the daemon and
# CLI of the other, on a running group. The old release is built from UPGRADE_BASE's sources (git archive:
# needs the commit in the clone), the last commit before the groups manager and internal/groupstate
# (group state header version 1). Takes about 2 minutes cold (the old gpuslice and library), seconds warm.
UPGRADE_BASE ?= ba6fd52
UPGRADE_OLD := $(BUILD)/upgrade/$(UPGRADE_BASE)
TEST_TARGETS += test-upgrade

$(UPGRADE_OLD)/bin/gpuslice:
	rm -rf $(UPGRADE_OLD) && mkdir -p $(UPGRADE_OLD) && git archive $(UPGRADE_BASE) | tar -x -C $(UPGRADE_OLD)
	$(MAKE) -C $(UPGRADE_OLD) VERSION=$(UPGRADE_BASE) bin/gpuslice bin/libgpuslice.so

.PHONY: test-upgrade
test-upgrade: $(BIN)/gpuslice $(BIN)/libgpuslice.so $(BIN)/gs-memfill $(BIN)/sim/libcuda.so.1 $(BIN)/sim/libnvidia-ml.so.1 $(UPGRADE_OLD)/bin/gpuslice
	GPUSLICE_BIN=$(abspath $(BIN)) GPUSLICE_OLD_BIN=$(abspath $(UPGRADE_OLD)/bin) \
		$(GO) test -tags upgrade -count=1 -v -run Upgrade ./test/upgrade/ | grep -E '^(---|\s+---|ok|FAIL|PASS)|upgrade:'; \
		exit $${PIPESTATUS[0]}
