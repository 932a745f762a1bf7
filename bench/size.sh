#!/usr/bin/env bash
# bench/size.sh [REV...]: lines of Go by kind at each revision (default the
# working tree): product (what the binary and its packages are), test
# support (harness/, mocks/, and the test helpers that lived among product
# packages before they moved to harness/), tests (_test.go), and the
# product's ten most complex functions (gocyclo from the Go module proxy,
# run, not a dependency of the project).
set -euo pipefail
cd "$(dirname "$0")/.."
support='^(harness|mocks|e2e|bench|docgen)/|^internal/(mlflowtest|promtest|testbin|launchertest|hostile|authproxy|stallfs|waitfor|syncbuf)/|/(closetest|cgrouptest|spooltest)/'
count() { # dir
	(cd "$1" && git ls-files '*.go' 2>/dev/null || find . -name '*.go' | sed 's|^\./||') |
		awk -v s="$support" '{ kind = ($0 ~ /_test\.go$/) ? "tests" : ($0 ~ s) ? "support" : "product"; print kind, $0 }' |
		while read -r kind f; do printf '%s %s\n' "$kind" "$(wc -l <"$1/$f")"; done |
		awk '{ n[$1] += $2 } END { printf "product %d, test support %d, tests %d\n", n["product"], n["support"], n["tests"] }'
}
cyclo() { # dir
	# The product only: what count calls tests and test support is left out.
	(cd "$1" && go run github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0 -top 10 -ignore "_test\.go\$|$support" .)
}
if [ $# -eq 0 ]; then
	echo "== working tree"; count .; cyclo .
	exit
fi
for rev in "$@"; do
	d=$(mktemp -d); git archive "$rev" | tar -x -C "$d"
	(cd "$d" && git init -q && git add -A >/dev/null 2>&1)
	echo "== $rev"; count "$d"; cyclo "$d"
	rm -rf "$d"
done
