# Tests of libgpuslice (included by mk/libgpuslice.mk). Everything runs under
# ASan/UBSan: unit tests link the pure sources directly; the hook tests use
# $(LIB_ASAN) against the simulated GPU in $(BIN)/sim.
LIB_TEST_BIN := $(BUILD)/asan/libgpuslice-tests
LIB_TEST_CFLAGS = $(CFLAGS_COMMON) $(SAN_FLAGS) -I$(LIB_DIR)/include
LIB_UNIT_SRCS := $(addprefix $(LIB_DIR)/src/,account.c config.c group.c libc_sym.c log.c procfs.c ptrtab.c view.c)
LIB_UNIT_TESTS := unit_parse_test unit_acct_test group_test
LIB_TEST_DEPS := $(LIB_DEPS) $(LIB_DIR)/tests/check.h

$(LIB_TEST_BIN)/%_test: $(LIB_DIR)/tests/%_test.c $(LIB_TEST_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_TEST_CFLAGS) -o $@ $< $(LIB_UNIT_SRCS) -ldl -lpthread

.PHONY: test-lib test-lib-unit
test-lib-unit: $(addprefix $(LIB_TEST_BIN)/,$(LIB_UNIT_TESTS))
	@set -e; for t in $^; do echo "  $$t"; $$t; done

test-lib: test-lib-unit
