#!/usr/bin/env bash
# Release artifacts for the crate's version, built on this machine (`make dist`) and by the release workflow on each
# architecture's own runner (.github/workflows/release.yml), so that both take the same path.
#
#   hack/dist.sh all <dir>                     everything below for this machine's architecture, then SHA256SUMS
#   hack/dist.sh chart <dir> [image repository] the packaged chart; its default image.repository is the argument,
#                                              its home and sources $SOURCE_URL when set
#   hack/dist.sh image <dir>                   the controller image as an OCI layout archive (needs `make image`)
#   hack/dist.sh cli <dir>                     the CLI as <name>-<version>-<os>-<arch>.tar.gz (needs a release build)
#   hack/dist.sh sbom <dir>                    a CycloneDX SBOM of this architecture's image: the crates in the
#                                              controller binary and the Debian packages of its C libraries
#   hack/dist.sh index <dir>                   one OCI layout (<dir>/image-index) holding every architecture's image
#                                              of <dir> under an index annotated like each image, for `crane push`
#   hack/dist.sh artifacthub <dir>             Artifact Hub's repository metadata as an OCI layout
#                                              (<dir>/artifacthub-metadata), for `crane push` to the chart's
#                                              `artifacthub.io` tag; ARTIFACTHUB_REPOSITORY_ID becomes its repositoryID
#   hack/dist.sh sums <dir>                    SHA256SUMS of every file in <dir>
#   hack/dist.sh krew <dir> <download base URL> a krew plugin manifest for the CLI archives in <dir>/SHA256SUMS
#   hack/dist.sh notes                         this version's CHANGELOG section
#
# IMAGE_REPOSITORY is where the release pushes the image (the workflow: ghcr.io/<owner>/<repository>); the chart
# packaged from a checkout defaults to the local image `make image` builds.
#
# It runs on the release runners' own shells: macOS's /bin/bash is 3.2, where "${array[@]}" of an empty array is an
# unbound variable under `set -u`, so arrays are expanded as ${array[@]+"${array[@]}"} (tests/release.rs checks).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
name=local-registry-publisher
# A checkout with CRLF line ends (Windows without .gitattributes' eol=lf) must not yield an empty version.
version=$(tr -d '\r' <"$root/Cargo.toml" | sed -n 's/^version = "\(.*\)"$/\1/p' | head -n1)
[ -n "$version" ] || { echo "[dist] no version in $root/Cargo.toml" >&2; exit 1; }
case $(uname -m) in x86_64) arch=amd64 ;; aarch64 | arm64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
case $(uname -s) in Linux) os=linux ;; Darwin) os=darwin ;; MINGW* | MSYS* | CYGWIN*) os=windows ;; *) os=unknown ;; esac

say() { echo "[dist] $*" >&2; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

chart() {
  local out=$1 repository=${2:-${IMAGE_REPOSITORY:-}} stage="$scratch/chart"
  mkdir -p "$stage" && cp -r "$root/charts/$name" "$stage/"
  if [ -n "$repository" ]; then
    # The one line values.yaml marks as the release's image; anything else would be a silent no-op.
    grep -q '^  repository: .* # release: image repository$' "$stage/$name/values.yaml" ||
      { say "charts/$name/values.yaml has no line marked '# release: image repository'"; return 1; }
    sed -i "s|^  repository: .* # release: image repository$|  repository: $repository # release: image repository|" \
      "$stage/$name/values.yaml"
  fi
  # Artifact Hub's annotations that only the release knows, under the `annotations:` block Chart.yaml ends with.
  tail -n 3 "$stage/$name/Chart.yaml" | grep -q '^annotations:$' ||
    { say "charts/$name/Chart.yaml must end with its annotations: block"; return 1; }
  {
    printf '  artifacthub.io/images: |\n    - name: %s\n      image: %s:%s\n' "$name" "${repository:-$name}" "$version"
    printf '  artifacthub.io/changes: |\n'
    changes | sed 's/^/    /'
    if [ -n "${SOURCE_URL:-}" ]; then
      printf '  artifacthub.io/links: |\n    - name: source\n      url: %s\n' "$SOURCE_URL"
    fi
  } >>"$stage/$name/Chart.yaml"
  # Where the chart comes from: the release's repository (SOURCE_URL, as `make image` takes it), which a checkout
  # does not know.
  if [ -n "${SOURCE_URL:-}" ]; then
    printf 'home: %s\nsources:\n  - %s\n' "$SOURCE_URL" "$SOURCE_URL" >>"$stage/$name/Chart.yaml"
  fi
  # helm on PATH (the release workflow builds it from tools/helm), else the tests' tools (LRP_TOOLS_DIR), else the
  # one hack/tools.sh built (helm alone: `make test` builds the main set, not every tool).
  local helm
  if ! helm=$(command -v helm); then
    if [ -n "${LRP_TOOLS_DIR:-}" ] && [ -x "$LRP_TOOLS_DIR/helm" ]; then
      helm="$LRP_TOOLS_DIR/helm"
    else
      helm="$("$root/hack/tools.sh" --dir helm)/helm"
    fi
  fi
  "$helm" package "$stage/$name" --destination "$out" >/dev/null
  say "chart: $out/$name-$version.tgz (image ${repository:-$name, the local build})"
}

image() {
  local out=$1 layout="$root/target/image/$name.tar"
  [ -f "$layout" ] || { say "$layout is missing: run 'make image' first"; return 1; }
  cp "$layout" "$out/$name-$version-image-linux-$arch.oci.tar"
  say "image: $out/$name-$version-image-linux-$arch.oci.tar"
}

# The CLI for its users' laptops: the binary, the license and the README; a .zip on Windows, a .tar.gz elsewhere.
# Only regular files: krew's extractor refuses anything else (a symbolic link stops the install with "unable to
# handle file type"), and krew itself links kubectl-registry_hosting to the binary. Windows has no links for users
# who unpack it by hand, so its archive also carries a copy under the plugin's name.
cli() {
  local out=$1 exe="" stage file
  [ "$os" = windows ] && exe=.exe
  local binary="$root/target/release/$name$exe"
  [ -x "$binary" ] || { say "$binary is missing: run 'cargo build --release' first"; return 1; }
  stage="$scratch/cli"
  mkdir -p "$stage"
  cp "$binary" "$root/LICENSE" "$root/README.md" "$stage/"
  if [ "$os" = windows ]; then
    cp "$binary" "$stage/kubectl-registry_hosting$exe"
    file="$name-$version-$os-$arch.zip"
    # 7-Zip on the Windows runners; Info-ZIP elsewhere.
    if command -v 7z >/dev/null; then
      (cd "$stage" && 7z a -tzip -bd "$out/$file" . >/dev/null)
    else
      (cd "$stage" && zip -q -X -r "$out/$file" .)
    fi
  else
    file="$name-$version-$os-$arch.tar.gz"
    # Reproducible where tar is GNU tar (Linux); macOS's bsdtar has no such options.
    local same=()
    tar --version 2>/dev/null | grep -q 'GNU tar' && same=(--sort=name --owner=0 --group=0 --mtime=@0)
    tar ${same[@]+"${same[@]}"} -C "$stage" -czf "$out/$file" .
  fi
  say "cli: $out/$file"
}

# A krew plugin manifest (kubectl registry-hosting) for the CLI archives listed in <dir>/SHA256SUMS, downloaded from
# <base URL> (the workflow: https://github.com/<owner>/<repository>/releases/download/v<version>).
krew() {
  local out=$1 base=$2 file sum platform goos goarch bin
  [ -f "$out/SHA256SUMS" ] || { say "$out/SHA256SUMS is missing: run 'hack/dist.sh sums $out' first"; return 1; }
  cat <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: registry-hosting
spec:
  version: "v$version"
  homepage: ${base%/releases/download/*}
  shortDescription: Show and check the cluster's local registry (KEP-1755)
  description: |
    Reads kube-public/local-registry-hosting as Tilt, Skaffold, ctlptl and in-cluster builders do: get shows what
    each of them would use, doctor checks that every published address answers, render writes the ConfigMap.
  platforms:
YAML
  local found=0
  while read -r sum file; do
    platform=${file#"$name-$version-"}
    case $platform in *.tar.gz) platform=${platform%.tar.gz} ;; *.zip) platform=${platform%.zip} ;; *) continue ;; esac
    case $platform in image-*) continue ;; esac
    # krew links (on Windows: copies) kubectl-registry_hosting to `bin`; the program knows it runs as the plugin
    # by that name.
    goos=${platform%-*} goarch=${platform#*-} bin=$name
    [ "$goos" = windows ] && bin=$name.exe
    found=$((found + 1))
    cat <<YAML
    - selector:
        matchLabels:
          os: $goos
          arch: $goarch
      uri: "$base/$file"
      sha256: "$sum"
      bin: $bin
      files:
        - from: $bin
          to: .
        - from: LICENSE
          to: .
YAML
  done <"$out/SHA256SUMS"
  [ $found -gt 0 ] || { say "no CLI archives in $out/SHA256SUMS"; return 1; }
}

# The CHANGELOG section of this version: the GitHub release's notes.
notes() {
  awk -v v="$version" '
    $0 ~ "^## \\[" v "\\]" { on = 1; next }
    on && /^## \[/ { exit }
    on { print }' "$root/CHANGELOG.md" | sed -e '/./,$!d'
}

# This version's CHANGELOG section as Artifact Hub's changes: one `- {"kind": ..., "description": ...}` line per
# entry, the kind from its Keep a Changelog heading (Added, Changed, Deprecated, Removed, Fixed, Security).
changes() {
  notes | awk '
    function flush() { if (text != "") print kind "\t" text; text = "" }
    /^### / { flush(); kind = tolower($2); next }
    /^- / { flush(); text = substr($0, 3); next }
    /^  +[^ ]/ && text != "" { line = $0; sub(/^ +/, "", line); text = text " " line; next }
    { flush() }
    END { flush() }' |
    jq -R -r 'split("\t") | "- " + ({kind: .[0], description: .[1]} | tojson)'
}

sbom() {
  local out=$1 cyclonedx packages="$root/target/image/$name.packages.json" file="$name-$version-linux-$arch.cdx.json"
  [ -f "$packages" ] || { say "$packages is missing: run 'make image' first"; return 1; }
  cyclonedx=$("$root/hack/cargo-tool.sh" cargo-cyclonedx 0.5.9)
  # Normal dependencies of the binary's package only: what ships, not the tests' or the workspace's tools.
  (cd "$root" && "$cyclonedx" cyclonedx --manifest-path Cargo.toml --format json --spec-version 1.5 \
    --no-build-deps --target "$(rustc -vV | sed -n 's/^host: //p')" --override-filename "$name-sbom" >/dev/null)
  rm -f "$root/testbed/$name-sbom.json" "$root/xtask/$name-sbom.json"
  # The image's other files: the C libraries, each from the Debian package `make image` recorded in the image.
  jq --slurpfile debs "$packages" '.components += [$debs[0][] | {type: "library", "bom-ref": .purl, name, version,
      purl, licenses: [{expression: .license}], properties: [{name: "debian:source", value: .source}]}]' \
    "$root/$name-sbom.json" >"$out/$file"
  rm -f "$root/$name-sbom.json"
  say "sbom: $out/$file"
}

# Every architecture's image archive in <dir> as one OCI layout, <dir>/image-index, whose index.json names one image
# index that lists each image and carries their annotations (title, description, licenses, version, revision,
# source): `crane push <dir>/image-index <reference>` pushes it whole, annotations included (crane's `index append`
# writes none).
index() {
  local out=$1 merged="$1/image-index" archive unpacked descriptors="[]" annotations="{}" blob digest
  rm -rf "$merged" && mkdir -p "$merged/blobs/sha256"
  for archive in "$out/$name-$version"-image-linux-*.oci.tar; do
    [ -f "$archive" ] || { say "no image archives in $out: run 'hack/dist.sh image $out' first"; return 1; }
    unpacked="$scratch/$(basename "$archive" .oci.tar)"
    mkdir -p "$unpacked" && tar -xf "$archive" -C "$unpacked"
    cp "$unpacked"/blobs/sha256/* "$merged/blobs/sha256/"
    descriptors=$(jq --argjson all "$descriptors" '$all + [.manifests[0]
      | .annotations |= with_entries(select(.key | startswith("org.opencontainers.image.") and . != "org.opencontainers.image.ref.name"))]' \
      "$unpacked/index.json")
    annotations=$(jq '.manifests[0].annotations | with_entries(select(.key | startswith("org.opencontainers.image.")
      and . != "org.opencontainers.image.ref.name"))' "$unpacked/index.json")
  done
  blob=$(jq -cn --argjson manifests "$descriptors" --argjson annotations "$annotations" '{schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json", manifests: $manifests, annotations: $annotations}')
  printf '%s' "$blob" >"$scratch/index-blob"
  digest=$(sha256sum "$scratch/index-blob" | cut -d' ' -f1)
  mv "$scratch/index-blob" "$merged/blobs/sha256/$digest"
  jq -cn --arg digest "sha256:$digest" --argjson size "$(wc -c <"$merged/blobs/sha256/$digest")" '{schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{mediaType: "application/vnd.oci.image.index.v1+json", digest: $digest, size: $size}]}' \
    >"$merged/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$merged/oci-layout"
  say "image index: $merged ($(jq '.manifests | length' "$merged/blobs/sha256/$digest") images)"
}

# Writes file $2 as a blob of the layout $1; prints its digest and size.
layout_blob() {
  local digest
  digest=$(sha256sum "$2" | cut -d' ' -f1)
  cp "$2" "$1/blobs/sha256/$digest"
  printf 'sha256:%s %s\n' "$digest" "$(wc -c <"$2" | tr -d ' ')"
}

# charts/artifacthub-repo.yml as the artifact Artifact Hub reads from a chart repository's `artifacthub.io` tag: an
# empty config of type application/vnd.cncf.artifacthub.config.v1+yaml and the file as the one layer of type
# application/vnd.cncf.artifacthub.repository-metadata.layer.v1.yaml (what Artifact Hub's documented `oras push`
# makes), as an OCI layout that crane, already the release's tool, pushes.
artifacthub() {
  local out=$1 layout="$1/artifacthub-metadata" file="$scratch/artifacthub-repo.yml"
  local config config_size layer layer_size manifest manifest_size
  local id=${ARTIFACTHUB_REPOSITORY_ID:-}
  rm -rf "$layout" && mkdir -p "$layout/blobs/sha256"
  : >"$file"
  if [ -n "$id" ]; then
    # Only a UUID reaches the YAML: a repository variable cannot add owners or anything else to it.
    [[ $id =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]] ||
      { say "ARTIFACTHUB_REPOSITORY_ID is not an Artifact Hub repository ID (a lower-case UUID)"; return 1; }
    printf 'repositoryID: %s\n' "$id" >>"$file"
  fi
  cat "$root/charts/artifacthub-repo.yml" >>"$file"
  : >"$scratch/empty"
  read -r config config_size < <(layout_blob "$layout" "$scratch/empty")
  read -r layer layer_size < <(layout_blob "$layout" "$file")
  jq -cn --arg config "$config" --arg layer "$layer" --argjson size "$layer_size" '{schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.cncf.artifacthub.config.v1+yaml", digest: $config, size: 0},
    layers: [{mediaType: "application/vnd.cncf.artifacthub.repository-metadata.layer.v1.yaml", digest: $layer,
      size: $size, annotations: {"org.opencontainers.image.title": "artifacthub-repo.yml"}}]}' >"$scratch/manifest"
  read -r manifest manifest_size < <(layout_blob "$layout" "$scratch/manifest")
  jq -cn --arg digest "$manifest" --argjson size "$manifest_size" '{schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $digest, size: $size}]}' \
    >"$layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  say "Artifact Hub metadata: $layout (repositoryID: ${id:-none yet})"
}

sums() {
  local out=$1
  (cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
  say "checksums: $out/SHA256SUMS"
}

main() {
  local command=${1:-} out=${2:-}
  [ "$command" = notes ] && { notes; return; }
  [ -n "$command" ] && [ -n "$out" ] || { sed -n '4,20p' "$0" >&2; exit 2; }
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  case $command in
    all)
      rm -f "$out"/*
      chart "$out"; image "$out"; cli "$out"; sbom "$out"; sums "$out"
      (cd "$out" && ls -l --block-size=K | tail -n +2 | awk '{ printf "[dist]   %8s  %s\n", $5, $9 }') >&2 ;;
    chart) chart "$out" "${3:-}" ;;
    krew) krew "$out" "${3:?hack/dist.sh krew <dir> <download base URL>}" ;;
    image | cli | sbom | sums | index | artifacthub) "$command" "$out" ;;
    *) sed -n '4,20p' "$0" >&2; exit 2 ;;
  esac
}

main "$@"
