#!/usr/bin/env bash
# Lists every skipped test, with its reason, from test logs: `go test -v`
# output (the reason is the last "file.go:N: ..." line the test logged before
# its "--- SKIP: TestX" line; the package is named by the next "ok"/"FAIL"
# line) and lines "SKIP: <test>: <reason>" that other test programs print.
# Usage: hack/skipped.sh LOG...
set -euo pipefail
awk '
function flush(pkg,   i) { for (i = 1; i <= n; i++) print "  " pkg " " pend[i]; n = 0 }
/^[ \t]*=== RUN / { reason = ""; next }
/^[ \t]+[^ \t]+\.go:[0-9]+: / { reason = $0; sub(/^[ \t]+/, "", reason); next }
/^[ \t]*--- SKIP: / { pend[++n] = $3 ": " reason; reason = ""; next }
/^(ok|FAIL)[ \t]+[^ \t]+\// { flush($2); next }
/^SKIP: / { sub(/^SKIP: /, ""); print "  " $0 }
END { flush("(package unknown)") }
' "$@"
