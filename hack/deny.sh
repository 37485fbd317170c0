#!/usr/bin/env bash
# `make lint`'s supply-chain check: every dependency's license, source and RustSec advisories (deny.toml).
#
#   hack/deny.sh <cargo-deny binary>
#
# Advisories are checked against a checkout of github.com/RustSec/advisory-db in the tool cache
# ($LRP_CACHE_DIR/advisory-dbs). With LRP_ADVISORY_FETCH=1 (the GitHub workflows) cargo-deny fetches the newest
# database first; otherwise the check runs offline on the copy it finds and says how old that copy is. A machine
# with no copy and no route to GitHub fails, naming the directory to put a clone in.
set -euo pipefail

deny=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${LRP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-registry-publisher}
export LRP_ADVISORY_DBS="$cache/advisory-dbs"
mkdir -p "$LRP_ADVISORY_DBS"
cd "$root"

"$deny" --log-level error check --show-stats licenses bans sources

if [ "${LRP_ADVISORY_FETCH:-0}" = 1 ]; then
  "$deny" --log-level error check advisories
  exit
fi
# Where cargo-deny looks for the database (the directory is named after a hash of its URL).
db=$({ "$deny" --log-level debug --offline check advisories 2>&1 || true; } |
  sed -n "s/.*Opening advisory database at '\(.*\)'.*/\1/p" | head -n1)
[ -n "$db" ] || { echo "[deny] cargo-deny did not say where it keeps the advisory database" >&2; exit 1; }
if [ ! -d "$db/.git" ]; then
  echo "[deny] no RustSec advisory database at $db; cloning it from GitHub" >&2
  git clone --quiet https://github.com/RustSec/advisory-db "$db" 2>/dev/null || {
    rm -rf "$db"
    echo "[deny] cannot reach github.com: put a clone of https://github.com/RustSec/advisory-db at $db" >&2
    exit 1
  }
fi
echo "[deny] RustSec advisory database of $(git -C "$db" show -s --format=%cs HEAD) (offline copy in $db)" >&2
"$deny" --log-level error --offline check advisories
