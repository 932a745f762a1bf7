#!/usr/bin/env bash
# bench/size.sh [REV...]: lines of Go by kind at each revision (default the
# working tree): product (what the binary and its packages are), test
# support (harness/, mocks/, and the test helpers that lived among product
# packages before they moved to harness/), tests (_test.go), and the
# product's ten most complex functions (gocyclo from the Go module proxy,
# run, not a dependency of the project) and ten longest (lines from func to
# its closing brace, gofmt's column 0), and the trackers' imports: the
# bridge packages and the cgo packages (outside the standard library) each
# adapter depends on, the packages outside tracker/ among them that import
# tracker again (an import back up), and the product packages outside
# tracker/ that import an adapter.
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
longest() { # dir
	(cd "$1" && git ls-files '*.go' | grep -v '_test\.go$' | grep -Ev "$support" |
		xargs awk '/^func / { name = $0; sub(/ *\{$/, "", name); start = FNR; file = FILENAME }
			/^}/ && start { printf "%d %s:%d %s\n", FNR - start + 1, file, start, name; start = 0 }' |
		sort -rn | awk 'NR <= 10')
}
imports() { # dir
	(
		cd "$1"
		mod=$(go list -m)
		for a in tracker/mlflow tracker/wandb; do
			deps=$(go list -deps "./$a" | grep "^$mod/" | grep -vx "$mod/$a")
			cgo=$(go list -deps -f '{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}' "./$a" | grep -c . || true)
			up=""
			for d in $deps; do
				case $d in "$mod"/tracker | "$mod"/tracker/*) continue ;; esac
				if go list -deps "$d" | grep -qx "$mod/tracker"; then up="$up ${d#"$mod"/}"; fi
			done
			printf '%s: %d bridge packages, %d cgo outside the standard library; back up:%s\n' "$a" "$(echo "$deps" | grep -c .)" "$cgo" "${up:- none}"
		done
		printf 'outside tracker/, importing an adapter:'
		go list -f '{{.ImportPath}} {{join .Imports " "}}' ./... |
			awk -v m="$mod" '$1 !~ "^" m "/tracker(/|$)" { for (i = 2; i <= NF; i++) if ($i ~ "^" m "/tracker/[^/]+$") { sub("^" m "/", "", $1); printf " %s", $1; break } }'
		echo
	)
}
if [ $# -eq 0 ]; then
	echo "== working tree"; count .; cyclo .; longest .; imports .
	exit
fi
for rev in "$@"; do
	d=$(mktemp -d); git archive "$rev" | tar -x -C "$d"
	(cd "$d" && git init -q && git add -A >/dev/null 2>&1)
	echo "== $rev"; count "$d"; cyclo "$d"; longest "$d"; imports "$d"
	rm -rf "$d"
done
