#!/usr/bin/env bash
# Builds the Go controller-runtime baseline the benchmarks compare against (benches/baseline, pinned by its go.mod and
# go.sum) into the tools cache, keyed by its sources and the Go version, and prints the binary's path. A warm run
# takes a second; a cold one about two minutes on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${LRP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-registry-publisher}
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly
src=$root/benches/baseline
key=$({ cat "$src/go.mod" "$src/go.sum" "$src"/*.go; go env GOVERSION; } | sha256sum | cut -c1-12)
dir=$cache/baseline-$key
if [ ! -x "$dir/baseline" ]; then
  started=$(date +%s)
  echo "[baseline] building the Go controller-runtime baseline into $dir (about 2 minutes cold)" >&2
  rm -rf "$dir.partial" && mkdir -p "$dir.partial"
  log=$(mktemp)
  ( while sleep 30; do echo "[baseline]   $(( $(date +%s) - started ))s, $(wc -l <"$log") packages compiled" >&2; done ) &
  ticker=$!
  (cd "$src" && go build -v -trimpath -ldflags "-s -w" -o "$dir.partial/baseline" .) 2>"$log" ||
    { kill $ticker; echo "[baseline] build failed:" >&2; tail -n 30 "$log" >&2; exit 1; }
  kill $ticker 2>/dev/null || true
  rm -f "$log"
  mv "$dir.partial" "$dir"
  find "$cache" -maxdepth 1 -name 'baseline-*' ! -path "$dir" -exec rm -rf {} + 2>/dev/null || true
  echo "[baseline] built in $(( $(date +%s) - started ))s" >&2
fi
echo "$dir/baseline"
