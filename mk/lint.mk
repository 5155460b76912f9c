# make lint (in make test; a finding fails it): golangci-lint (.golangci.yml; built by hack/lint/build.sh,
# cached by version) over every package and build tag, and clang-format (.clang-format, Debian's
# clang-format 14) over every C source. `go vet` stays in test-go-vet. `make lint-fix` applies the
# formatters (goimports, clang-format) in place.
TEST_TARGETS += lint
LINT_C_FILES = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h')

.PHONY: lint lint-go lint-c lint-fix
lint: lint-go lint-c

lint-go:
	@lint=$$(hack/lint/build.sh) && $$lint run ./...

lint-c:
	@command -v clang-format >/dev/null || { echo "clang-format is missing (scripts/deps.sh installs it)"; exit 1; }
	@clang-format --dry-run --Werror $(LINT_C_FILES)

lint-fix:
	@lint=$$(hack/lint/build.sh) && $$lint fmt ./...
	clang-format -i $(LINT_C_FILES)
