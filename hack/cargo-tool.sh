#!/usr/bin/env bash
# Installs a pinned cargo tool (cargo-mutants, ...) into the cache outside the work tree, once, and prints the path of
# its binary. A warm run takes a moment; a cold one compiles the tool (minutes), with progress from cargo.
#
#   hack/cargo-tool.sh <crate> <version> [binary]
set -euo pipefail

crate=$1 version=$2 binary=${3:-$1}
cache=${LRP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-registry-publisher}
root="$cache/cargo-tools/$crate-$version-$(rustc --version | sha256sum | cut -c1-8)"
if [ ! -x "$root/bin/$binary" ]; then
  echo "[cargo-tool] installing $crate $version into $root (compiles it: a few minutes cold)" >&2
  rm -rf "$root.partial"
  cargo install --quiet --locked --root "$root.partial" --version "$version" "$crate" >&2
  mv "$root.partial" "$root"
  find "$cache/cargo-tools" -maxdepth 1 -name "$crate-*" ! -path "$root" -exec rm -rf {} + 2>/dev/null || true
fi
echo "$root/bin/$binary"
