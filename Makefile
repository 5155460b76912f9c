# gpuslice top-level Makefile. Components add fragments under mk/*.mk that append
# their outputs to ALL_TARGETS and their test targets to TEST_TARGETS.
SHELL := /bin/bash
BIN := bin
BUILD := build
GO ?= go
CC ?= gcc
CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fvisibility=hidden -fPIC -O2 -g -Iinclude
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all -O1 -g
ALL_TARGETS :=
TEST_TARGETS :=

.DEFAULT_GOAL := all

include $(sort $(wildcard mk/*.mk))

.PHONY: all test clean
all: $(ALL_TARGETS)

# Every test, in order (one failing target stops the run).
test: all
	@set -e; for t in $(TEST_TARGETS); do echo "==> $$t"; $(MAKE) --no-print-directory $$t; done

clean:
	rm -rf $(BIN) $(BUILD)
