#!/usr/bin/env bash
# Moves every place that carries the release version to a new one, and opens its CHANGELOG section.
#
#   hack/version.sh <x.y.z> [repository root]      (make version VERSION=x.y.z)
#
# The crate (Cargo.toml, Cargo.lock), the chart's version and appVersion, the plain manifests rendered from it, the
# Dockerfile's label, the image tags the README and docs name, and CHANGELOG.md: what is under "Unreleased" becomes
# the new version's section, dated today. Tests check that the chart and the image follow the crate.
set -euo pipefail

new=${1:-}
root=${2:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
[[ $new =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
  { echo "usage: hack/version.sh <x.y.z>: a semantic version, got ${new:-nothing}" >&2; exit 2; }
cd "$root"
old=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ "$old" != "$new" ] || { echo "the version is already $new" >&2; exit 1; }
grep -q "^## \[$new\]" CHANGELOG.md && { echo "CHANGELOG.md already has a section for $new" >&2; exit 1; }
quoted=${old//./\\.}

# The package's own version: the first `version =` of Cargo.toml, and its entry in the lock file.
sed -i "0,/^version = \"$quoted\"$/s//version = \"$new\"/" Cargo.toml
awk -v old="$old" -v new="$new" '
  prev == "name = \"local-registry-publisher\"" && $0 == "version = \"" old "\"" { $0 = "version = \"" new "\"" }
  { print; prev = $0 }' Cargo.lock >Cargo.lock.new && mv Cargo.lock.new Cargo.lock
sed -i -e "s/^version: $quoted$/version: $new/" -e "s/^appVersion: \"$quoted\"$/appVersion: \"$new\"/" \
  charts/local-registry-publisher/Chart.yaml
sed -i -e "s/app.kubernetes.io\/version: \"$quoted\"/app.kubernetes.io\/version: \"$new\"/" \
  -e "s/helm.sh\/chart: local-registry-publisher-$quoted$/helm.sh\/chart: local-registry-publisher-$new/" \
  -e "s/image: \"local-registry-publisher:$quoted\"/image: \"local-registry-publisher:$new\"/" \
  deploy/local-registry-publisher.yaml
sed -i "s/org.opencontainers.image.version=\"$quoted\"/org.opencontainers.image.version=\"$new\"/" Dockerfile
# Image tags in prose and commands (docker build -t, kind load ...).
grep -rl --include='*.md' --include=Dockerfile "local-registry-publisher:$quoted" README.md Dockerfile docs charts |
  xargs -r sed -i "s/local-registry-publisher:$quoted\b/local-registry-publisher:$new/g"
# Installs from a release name its version (helm install oci://... --version x.y.z).
sed -i "s/--version $quoted\b/--version $new/g" README.md
sed -i "0,/^## \[Unreleased\]$/s//## [Unreleased]\n\n## [$new] - $(date -u +%Y-%m-%d)/" CHANGELOG.md

echo "version $old -> $new; review with git diff, then commit and tag v$new" >&2
