#!/usr/bin/env bash
# Lists every skipped test, with its reason, from test logs: `go test -v`
# output ("--- SKIP: TestX" followed by the reason the test logged, then the
# package's "ok"/"FAIL" line) and lines "SKIP: <test>: <reason>" that other
# test programs print. Usage: hack/skipped.sh LOG...
set -euo pipefail
awk '
function flush(pkg,   i) { for (i = 1; i <= n; i++) print "  " pkg " " pend[i]; n = 0 }
/^[ \t]*--- SKIP: / {
	name = $3
	reason = ""
	if ((getline line) > 0) { sub(/^[ \t]+/, "", line); reason = line }
	pend[++n] = name ": " reason
	next
}
/^(ok|FAIL|---)[ \t]+[^ \t]+[ \t]/ && $2 ~ /\// { flush($2); next }
/^SKIP: / { sub(/^SKIP: /, ""); print "  " $0 }
END { flush("(package unknown)") }
' "$@"
