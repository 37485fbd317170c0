#!/usr/bin/env bash
# `make lint`'s supply-chain check: every dependency's license, source and RustSec advisories (deny.toml).
#
#   hack/deny.sh
#
# cargo-deny (pinned below) is built once into the tool cache. Advisories are checked against a git checkout of
# the RustSec database in $LRP_ADVISORY_DBS (default $LRP_CACHE_DIR/advisory-dbs), taken in this order from:
#   1. the tool cache's copy (replaced by LRP_ADVISORY_DB's when that one is newer);
#   2. a clone from GitHub;
#   3. LRP_ADVISORY_DB: a git bundle or a git checkout of the database (.ci/run names ../shared/ci's bundle, since
#      the project's machines reach no GitHub).
# With LRP_ADVISORY_FETCH=1 (the GitHub workflows) cargo-deny fetches the newest database itself.
# The advisories check never passes without a database: no copy, or one holding no advisory, fails with what to do.
# It prints the database's date and age, so an old copy shows as old.
set -euo pipefail

deny_version=0.20.2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${LRP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-registry-publisher}
export LRP_ADVISORY_DBS=${LRP_ADVISORY_DBS:-$cache/advisory-dbs}
mkdir -p "$LRP_ADVISORY_DBS"
deny=$("$root/hack/cargo-tool.sh" cargo-deny "$deny_version")
cd "$root"

say() { echo "[deny] $*" >&2; }

"$deny" --log-level error check --show-stats licenses bans sources

if [ "${LRP_ADVISORY_FETCH:-0}" = 1 ]; then
  "$deny" --log-level error check advisories
  exit
fi

# Where cargo-deny opens the database (a directory named after a hash of its URL).
db=$({ "$deny" --log-level debug --offline check advisories 2>&1 || true; } |
  sed -n "s/.*Opening advisory database at '\(.*\)'.*/\1/p" | head -n1)
[ -n "$db" ] || { say "cargo-deny $deny_version did not say where it keeps the advisory database"; exit 1; }

# The commit time (seconds) of a database checkout or bundle; empty when it is not one.
commit_time() {
  if [ -f "$1" ]; then
    local scratch; scratch=$(mktemp -d)
    git clone --quiet "$1" "$scratch/db" 2>/dev/null && git -C "$scratch/db" show -s --format=%ct HEAD 2>/dev/null
    rm -rf "$scratch"
  else
    git -C "$1" show -s --format=%ct HEAD 2>/dev/null
  fi
}

# Clones a source (URL, bundle or checkout) into $db, replacing what is there only once the clone succeeded.
take() {
  rm -rf "$db.partial"
  if git clone --quiet "$1" "$db.partial" 2>/dev/null; then
    rm -rf "$db"; mv "$db.partial" "$db"
  else
    rm -rf "$db.partial"; return 1
  fi
}

named=${LRP_ADVISORY_DB:-}
if [ -n "$named" ] && [ ! -e "$named" ]; then
  say "LRP_ADVISORY_DB=$named does not exist"; exit 1
fi
if [ -d "$db/.git" ] && [ -n "$(commit_time "$db")" ]; then
  if [ -n "$named" ] && [ "$(commit_time "$named")" -gt "$(commit_time "$db")" ] 2>/dev/null; then
    say "LRP_ADVISORY_DB ($named) is newer than the cached copy; taking it"
    take "$named" || { say "cannot clone LRP_ADVISORY_DB=$named (a git bundle or checkout)"; exit 1; }
  fi
else
  say "no RustSec advisory database at $db; cloning it from GitHub"
  if ! timeout 120 git clone --quiet https://github.com/RustSec/advisory-db "$db.partial" 2>/dev/null; then
    rm -rf "$db.partial"
    if [ -z "$named" ]; then
      say "cannot reach github.com, and LRP_ADVISORY_DB names no copy: set LRP_ADVISORY_DB to a git bundle or"
      say "checkout of https://github.com/RustSec/advisory-db (.ci/run uses ../shared/ci/rustsec-advisory-db.bundle)"
      exit 1
    fi
    say "cannot reach github.com; taking LRP_ADVISORY_DB ($named)"
    take "$named" || { say "cannot clone LRP_ADVISORY_DB=$named (a git bundle or checkout)"; exit 1; }
  else
    rm -rf "$db"; mv "$db.partial" "$db"
  fi
fi

# A checkout without advisories (an empty or wrong repository) would pass every crate: refuse it.
advisories=$({ find "$db/crates" -name 'RUSTSEC-*.md' 2>/dev/null || true; } | wc -l)
if [ "$advisories" = 0 ]; then
  say "the database at $db holds no RustSec advisory (crates/*/RUSTSEC-*.md); it is not the RustSec database"
  exit 1
fi
when=$(commit_time "$db")
say "RustSec advisory database of $(date -u -d "@$when" +%F) ($(( ($(date +%s) - when) / 86400 )) days old," \
  "$advisories advisories; offline copy in $db)"
if (( $(date +%s) - when > 90 * 86400 )); then
  say "that copy is older than 90 days: advisories published since are not checked (where GitHub is reachable,"
  say "LRP_ADVISORY_FETCH=1 fetches the newest, as the GitHub workflows do)"
fi
"$deny" --log-level error --offline check advisories
