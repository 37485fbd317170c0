#!/usr/bin/env bash
# Runs the node agent's real-node tests (NODE_AGENT_TESTS, from the Makefile) on each containerd release given, and
# when every one passes, records what ran in docs/containerd-window.md: the release the started containerd reported,
# how many tests passed on it, the commit and the day. The README's claims point there, and tests/chart/records.rs fails when
# the README names a release the record does not hold, or the record is of another release than the pins.
#
#   hack/containerd-window.sh MINOR...      (make test-containerd-window: 1.7 2.2 2.3 2.4)
#
# A failed run leaves the last record as it was.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
[ $# -gt 0 ] || { echo "usage: hack/containerd-window.sh MINOR... (1.7 2.2 2.3 2.4)" >&2; exit 2; }
cargo=${CARGO:-cargo}
record=docs/containerd-window.md
# The Makefile's one list of the node agent's tests, with its line continuations joined.
read -r -a tests <<<"$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' Makefile | sed -n 's/^NODE_AGENT_TESTS := //p')"
[ ${#tests[@]} -gt 0 ] || { echo "[window] no NODE_AGENT_TESTS in the Makefile" >&2; exit 1; }

export LRP_CONTAINERD_WINDOW=all
tools=$(hack/tools.sh)
main_minor=$("$tools/containerd" --version | awk '{ sub(/^v/, "", $3); split($3, v, "."); print v[1] "." v[2] }')
rows=()
for minor in "$@"; do
  binary="$tools/containerd-$minor/containerd"
  [ "$minor" = "$main_minor" ] && binary="$tools/containerd"
  [ -x "$binary" ] || { echo "[window] no containerd $minor in $tools (hack/tools.sh builds 1.7 2.2 2.3 and the main pin)" >&2; exit 2; }
  release=$("$binary" --version | awk '{ sub(/^v/, "", $3); print $3 }')
  echo "[window] the node agent's real-node tests on containerd $release"
  log=$(mktemp)
  LRP_TOOLS_DIR=$tools LRP_CONTAINERD=$minor "$cargo" test "${tests[@]}" 2>&1 | tee "$log" || { rm -f "$log"; echo "[window] containerd $release failed; $record is unchanged" >&2; exit 1; }
  passed=$(awk '/^test result: ok\./ { sum += $4 } END { print sum + 0 }' "$log")
  rm -f "$log"
  rows+=("| $release | $passed |")
done

commit=$(git rev-parse --short HEAD)
# A record of a tree with changes not committed says so: the commit alone would claim more than ran.
[ -z "$(git status --porcelain -- . ":(exclude)$record")" ] || commit+=" with uncommitted changes"
{
  echo "# The containerd window: the last run"
  echo
  echo "Written by \`make test-containerd-window\` (hack/containerd-window.sh) when every release passed; do not edit."
  echo "Each row is a containerd release the node agent's real-node tests (\`NODE_AGENT_TESTS\` in the Makefile) ran"
  echo "on, as the started containerd reported it, and how many of them passed there. The README's and"
  echo "[node-pulls.md](node-pulls.md#which-containerd-releases-are-proven)'s releases must each be here, and each"
  echo "pinned release (tools/containerd*/go.mod) too: tests/chart/records.rs checks both."
  echo
  echo "Commit \`$commit\`, $(date -u +%Y-%m-%d)."
  echo
  echo "| containerd | tests passed |"
  echo "|---|---:|"
  printf '%s\n' "${rows[@]}"
} >"$record"
echo "[window] recorded in $record"
