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
# Every Go binary is stamped here, and only here: its --version and start log
# (internal/version), and the Kubernetes version the scheduler is built on.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The Kubernetes version is named in hack/k8s/version only (go.mod and hack/k8s/go.mod pin the
# same one; test/k8sversion checks). Its binaries are cached by version under $(K8S_DIR).
K8S_VERSION := $(shell cat hack/k8s/version)
K8S_MINOR := $(word 2,$(subst ., ,$(K8S_VERSION)))
K8S_DIR := $(or $(GPUSLICE_CACHE),$(HOME)/.cache/gpuslice)/k8s/$(K8S_VERSION)
GO_LDFLAGS := -X github.com/gpuslice/gpuslice/internal/version.version=$(VERSION) \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(K8S_MINOR)
GO_BUILD = $(GO) build -ldflags '$(GO_LDFLAGS)'

.DEFAULT_GOAL := all

include $(sort $(wildcard mk/*.mk))

.PHONY: all test clean
all: $(ALL_TARGETS)

# Every test target runs, even after a failure; the run fails if any target failed.
# Go tests run verbose (GOFLAGS=-v) into $(BUILD)/test-logs/<target>.log, shown without the
# per-test RUN/PASS lines; the run ends with every skipped test and its reason (hack/skipped.sh).
TEST_LOGS := $(BUILD)/test-logs
test: all
	@rm -rf $(TEST_LOGS); mkdir -p $(TEST_LOGS); failed=""; for t in $(TEST_TARGETS); do echo "==> $$t"; \
	  GOFLAGS="$$GOFLAGS -v" $(MAKE) --no-print-directory $$t >$(TEST_LOGS)/$$t.log 2>&1 || failed="$$failed $$t"; \
	  grep -vE '^\s*(=== (RUN|PAUSE|CONT|NAME)|--- PASS: )' $(TEST_LOGS)/$$t.log; done; \
	echo "skipped tests (name: reason):"; hack/skipped.sh $(TEST_LOGS)/*.log; \
	if [ -n "$$failed" ]; then echo "FAILED test targets:$$failed"; exit 1; fi; \
	echo "all test targets passed: $(TEST_TARGETS)"

clean:
	rm -rf $(BIN) $(BUILD)
