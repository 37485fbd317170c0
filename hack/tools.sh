#!/usr/bin/env bash
# Builds the pinned Go tools (Kubernetes control plane and node, etcd, kwok, helm, containerd, CRI-O, runc, CNI plugins,
# crane and the tests' authenticating registry, CoreDNS, actionlint, krew, syft, promtool, kube-router) into a cache
# outside the work tree, after installing the Debian packages they need.
#
#   hack/tools.sh [SET|TOOL...]        build whatever is missing, then print the directory holding the binaries
#   hack/tools.sh --dir [SET|TOOL...]  print that directory only (exit 1 when something is not built yet)
#
# With no name every tool is built; `demo` names the demo's own tools (`make demo`, `make up`), so a first demo does
# not wait for the tested window's control planes, the older containerd, krew, syft and actionlint. `window` names the
# tested windows' other ends (the older and newer Kubernetes control planes, the other containerd releases) and CRI-O,
# which only the last runs of `make test` use, and `main` every other tool: `make test` builds `main` first and
# `window` in the background while the main pins' tests run. A name may also be one tool's (helm, k8s-1.25).
#
# Each tool is one Go module under tools/<name> (go.mod and go.sum committed). A build lands in
# $LRP_CACHE_DIR/tools/<name>-<version>-<hash of go.mod, go.sum, the module's own sources and this script>/ and is reused until one of those
# changes, so a warm run takes seconds. Every binary is then linked into $LRP_CACHE_DIR/bin-<hash of all>/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${LRP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/local-registry-publisher}
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=readonly

k8s_version=v1.36.3
# The tested window's other ends (README "Compatibility"): the chart's floor and the newest minor the proxy serves.
# Their control planes only (API server, controller-manager, scheduler), named with their minor: kube-apiserver-1.25.
k8s_window="1.25 1.37"
# The real node's containerd window (README "Node pulls"): the main pin (tools/containerd) is its newest end; 1.7,
# the oldest still shipped (older kind, k3s and MicroK8s), and 2.3, what kind, k3s and minikube ship today, are built
# always, since `make test` runs the node agent's tests on them; 2.2 only with LRP_CONTAINERD_WINDOW=all
# (`make test-containerd-window`). Each lands in a directory of its own, bin/containerd-<minor>/, so containerd finds
# the shim of its own release beside it.
containerd_window="1.7 2.3"
[ "${LRP_CONTAINERD_WINDOW:-}" = all ] && containerd_window="1.7 2.2 2.3"
containerd_module() { [ "$1" = 1.7 ] && echo github.com/containerd/containerd || echo github.com/containerd/containerd/v2; }
k8s_ldflags() {
  local v=${1:-$k8s_version} minor
  minor=${v#v1.}; minor=${minor%%.*}
  local flags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "$flags"
}

# name | version | "output=package" pairs
tools() {
  local k=k8s.io/kubernetes/cmd c=github.com/containerd/containerd/v2/cmd p=github.com/containernetworking/plugins/plugins
  echo "k8s|$k8s_version|kube-apiserver=$k/kube-apiserver kube-controller-manager=$k/kube-controller-manager kube-scheduler=$k/kube-scheduler kubectl=$k/kubectl kubelet=$k/kubelet kube-proxy=$k/kube-proxy"
  local minor
  for minor in $k8s_window; do
    echo "k8s-$minor|$(module_version "k8s-$minor" k8s.io/kubernetes)|kube-apiserver-$minor=$k/kube-apiserver kube-controller-manager-$minor=$k/kube-controller-manager kube-scheduler-$minor=$k/kube-scheduler"
  done
  echo "etcd|$(module_version etcd go.etcd.io/etcd/server/v3)|etcd=go.etcd.io/etcd/server/v3"
  echo "kwok|$(module_version kwok sigs.k8s.io/kwok)|kwok=sigs.k8s.io/kwok/cmd/kwok"
  echo "helm|$(module_version helm helm.sh/helm/v4)|helm=helm.sh/helm/v4/cmd/helm"
  echo "containerd|$(module_version containerd github.com/containerd/containerd/v2)|containerd=$c/containerd containerd-shim-runc-v2=$c/containerd-shim-runc-v2 ctr=$c/ctr"
  local module
  for minor in $containerd_window; do
    module=$(containerd_module "$minor")
    echo "containerd-$minor|$(module_version "containerd-$minor" "$module")|$(for b in containerd containerd-shim-runc-v2 ctr; do printf 'containerd-%s/%s=%s/cmd/%s ' "$minor" "$b" "$module" "$b"; done)"
  done
  echo "runc|$(module_version runc github.com/opencontainers/runc)|runc=github.com/opencontainers/runc"
  # CRI-O, the real node's other runtime (LRP_NODE_RUNTIME=crio), and crioimage: the testbed's ctr for it, built
  # against the image library CRI-O links (tools/crio/crioimage). pinns is built from the module's C sources.
  echo "crio|$(module_version crio github.com/cri-o/cri-o)|crio=github.com/cri-o/cri-o/cmd/crio crioimage=local-registry-publisher/tools/crio/crioimage"
  echo "cni|$(module_version cni github.com/containernetworking/plugins)|bridge=$p/main/bridge host-local=$p/ipam/host-local loopback=$p/main/loopback portmap=$p/meta/portmap"
  echo "crane|$(module_version crane github.com/google/go-containerregistry)|crane=github.com/google/go-containerregistry/cmd/crane authregistry=local-registry-publisher/tools/crane/authregistry"
  echo "coredns|$(module_version coredns github.com/coredns/coredns)|coredns=github.com/coredns/coredns"
  echo "actionlint|$(module_version actionlint github.com/rhysd/actionlint)|actionlint=github.com/rhysd/actionlint/cmd/actionlint"
  echo "krew|$(module_version krew sigs.k8s.io/krew)|krew=sigs.k8s.io/krew/cmd/krew"
  echo "syft|$(module_version syft github.com/anchore/syft)|syft=github.com/anchore/syft/cmd/syft"
  echo "promtool|$(module_version promtool github.com/prometheus/prometheus)|promtool=github.com/prometheus/prometheus/cmd/promtool"
  echo "kube-router|$(module_version kube-router github.com/cloudnativelabs/kube-router/v2)|kube-router=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
}

# The tested windows' other ends: the tools only LRP_KUBE_VERSION and LRP_CONTAINERD runs use.
window_tools() {
  local minor
  printf 'crio '
  for minor in $k8s_window; do printf 'k8s-%s ' "$minor"; done
  for minor in $containerd_window; do printf 'containerd-%s ' "$minor"; done
}

# The tools `make demo` runs: the control plane and kubectl (k8s), etcd, kwok, and the real node (containerd, runc,
# the CNI plugins, CoreDNS, and crane, which is the demo's registry and pushes to it).
demo_tools="k8s etcd kwok containerd runc cni coredns crane"

# Debian packages: runc links libseccomp (the chart's RuntimeDefault seccomp profile needs it); kube-proxy and the CNI
# portmap plugin program iptables; actionlint checks the workflows' shell steps with shellcheck (`make lint`); jq
# merges the image's Debian packages into its SBOM, zip packs the Windows CLI archive off Windows and unzip lists it
# (hack/dist.sh, tests/release.rs); kube-router, the NetworkPolicy enforcer of the chart's policy test, runs ipset;
# conmon watches each container of the CRI-O node (Debian's 2.1.6; CRI-O 1.36 asks for nothing newer).
# Installed here so the README's two commands stay the only set-up.
debian_packages="libseccomp-dev pkg-config iptables ipset shellcheck jq zip unzip conmon"
ensure_debian_packages() {
  local missing=() pkg
  for pkg in $debian_packages; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} = 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "[tools] missing Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
    return 1
  fi
  echo "[tools] installing Debian packages: ${missing[*]}" >&2
  local log; log=$(mktemp)
  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"; } >"$log" 2>&1 ||
    { echo "[tools] apt-get failed:" >&2; tail -n 20 "$log" >&2; rm -f "$log"; return 1; }
  rm -f "$log"
}

module_version() { awk -v m="$2" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$root/tools/$1/go.mod"; }

# Bump when the way a tool is built changes without its go.mod, targets or flags changing.
recipe=2

# A build is keyed by everything that shapes it: the module pins, what is built, how, and by which Go.
key_of() {
  local name=$1 targets=$2
  # A module's own commands (tools/crane/authregistry) count too; tools.go and tests are not built.
  { cat "$root/tools/$name/go.mod" "$root/tools/$name/go.sum"
    find "$root/tools/$name" -name '*.go' ! -name tools.go ! -name '*_test.go' | sort | xargs -r cat
    echo "$targets|$(ldflags_of "$name")|$recipe"; go env GOVERSION; } |
    sha256sum | cut -c1-12
}

# Stamp the pinned version where a tool reports it (helm's source says only "v4.3").
ldflags_of() {
  case $1 in
    k8s) k8s_ldflags ;;
    k8s-*) k8s_ldflags "$(module_version "$1" k8s.io/kubernetes)" ;;
    helm) echo "-s -w -X helm.sh/helm/v4/internal/version.version=$(module_version helm helm.sh/helm/v4)" ;;
    containerd) echo "-s -w -X github.com/containerd/containerd/v2/version.Version=$(module_version containerd github.com/containerd/containerd/v2)" ;;
    containerd-*) local m; m=$(containerd_module "${1#containerd-}"); echo "-s -w -X $m/version.Version=$(module_version "$1" "$m")" ;;
    runc) local v; v=$(module_version runc github.com/opencontainers/runc); echo "-s -w -X main.version=${v#v}" ;;
    kube-router) echo "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$(module_version kube-router github.com/cloudnativelabs/kube-router/v2)" ;;
    *) echo "-s -w" ;;
  esac
}

# Build tags, as each project's own release builds use them.
tags_of() {
  case $1 in
    k8s|k8s-*) echo "selinux,notest" ;;
    containerd|containerd-*) echo "no_btrfs,no_devmapper" ;;
    runc) echo "seccomp,netgo,osusergo" ;;
    # As CRI-O's Makefile picks them here: no ostree, no gpgme (openpgp instead), no btrfs headers; libseccomp is.
    crio) echo "containers_image_ostree_stub,containers_image_openpgp,exclude_graphdriver_btrfs,btrfs_noversion,seccomp" ;;
    *) echo "" ;;
  esac
}

# runc and CRI-O need cgo (libseccomp); everything else is a static Go binary.
cgo_of() { case $1 in runc|crio) echo 1 ;; *) echo 0 ;; esac; }

# CRI-O refuses to start without pinns, a small static C program of its module, built by its own Makefile.
crio_pinns() {
  local src work
  src=$(cd "$root/tools/crio" && go list -m -f '{{.Dir}}' github.com/cri-o/cri-o)/pinns
  work=$(mktemp -d)
  cp -r "$src" "$work/pinns" && chmod -R u+w "$work"
  make -C "$work/pinns" >&2
  cp "$work/bin/pinns" "$1/pinns"
  rm -rf "$work"
}

# kwok exits with "no stages found" unless it is given Stage objects; its module ships the standard ones.
kwok_stages() {
  local src
  src=$(cd "$root/tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"; cat "$src/$f"
  done
}

elapsed() { local s=$(( $(date +%s) - $1 )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

build_tool() {
  local name=$1 version=$2 targets=$3 dir=$4
  local started log ldflags ticker
  started=$(date +%s)
  log=$(mktemp)
  ldflags=$(ldflags_of "$name")
  echo "[tools] building $name $version (${targets//=*([^ ])/}) into $dir" >&2
  rm -rf "$dir.partial"
  mkdir -p "$dir.partial/bin"
  # Progress for long builds: how many packages are done and which one is compiling, every 30 s.
  ( while sleep 30; do
      echo "[tools]   $name: $(elapsed "$started") elapsed, $(wc -l <"$log") packages compiled, last: $(tail -n1 "$log")" >&2
    done ) &
  ticker=$!
  (
    cd "$root/tools/$name"
    go mod download
    local target out pkg
    for target in $targets; do
      out=${target%%=*}; pkg=${target#*=}
      mkdir -p "$(dirname "$dir.partial/bin/$out")"
      CGO_ENABLED=$(cgo_of "$name") go build -v -trimpath -tags "$(tags_of "$name")" -ldflags "$ldflags" \
        -o "$dir.partial/bin/$out" "$pkg"
    done
  ) 2>"$log" || { kill $ticker 2>/dev/null; echo "[tools] building $name failed:" >&2; tail -n 40 "$log" >&2; rm -f "$log"; return 1; }
  kill $ticker 2>/dev/null || true
  rm -f "$log"
  [ "$name" = kwok ] && kwok_stages >"$dir.partial/bin/kwok-stages.yaml"
  if [ "$name" = crio ]; then
    crio_pinns "$dir.partial/bin" 2>"$log" || { echo "[tools] building pinns failed:" >&2; tail -n 20 "$log" >&2; rm -f "$log"; return 1; }
  fi
  mv "$dir.partial" "$dir"
  # Older builds of this tool are superseded; keep the cache from growing with every pin change.
  # (Versions start with "v": k8s-v1.36.3-... is superseded by another k8s-v*, never k8s-1.25-v1.25.4-....)
  find "$cache/tools" -maxdepth 1 -name "$name-v*" ! -path "$dir" -exec rm -rf {} + 2>/dev/null || true
  echo "[tools] built $name $version in $(elapsed "$started")" >&2
}

main() {
  shopt -s extglob
  local only_dir=0
  [ "${1:-}" = "--dir" ] && { only_dir=1; shift; }
  local wanted="" set=all arg
  for arg in "$@"; do
    case $arg in
      demo) wanted+=" $demo_tools" ;;
      window) wanted+=" $(window_tools)" ;;
      main) wanted+=" $(tools | cut -d'|' -f1 | grep -vxF "$(window_tools | tr ' ' '\n')" | xargs)" ;;
      all) wanted="" ; break ;;
      *) wanted+=" $arg" ;;
    esac
  done
  [ -n "$wanted" ] && set=$(echo "$@" | tr ' ' '+')
  # The whole window is a set of its own, so a window run and `make test` do not take each other's links away.
  [ "${LRP_CONTAINERD_WINDOW:-}" = all ] && set+=-window
  local started all_keys="" line name version targets key dir missing=0 names=""
  started=$(date +%s)
  [ $only_dir = 1 ] || ensure_debian_packages
  while IFS='|' read -r name version targets; do
    if [ -n "$wanted" ] && [[ " $wanted " != *" $name "* ]]; then continue; fi
    names+=" $name"
    key=$(key_of "$name" "$targets")
    dir="$cache/tools/$name-$version-$key"
    all_keys+="$name-$version-$key "
    if [ ! -d "$dir" ]; then
      if [ $only_dir = 1 ]; then missing=1; continue; fi
      build_tool "$name" "$version" "$targets" "$dir"
    fi
  done < <(tools)
  local unknown=""
  for arg in $wanted; do [[ " $names " == *" $arg "* ]] || unknown+=" $arg"; done
  [ -z "$unknown" ] || { echo "[tools] no such tool:$unknown (the tools: $(tools | cut -d'|' -f1 | xargs))" >&2; exit 2; }
  [ $missing = 0 ] || { echo "[tools] not built yet: run hack/tools.sh $*" >&2; exit 1; }
  # One directory of links per set, so `make demo` and `make test` do not take each other's away.
  local bin="$cache/bin-$set-$(echo "$all_keys" | sha256sum | cut -c1-12)"
  if [ ! -d "$bin" ]; then
    mkdir -p "$bin.partial"
    for key in $all_keys; do ln -sf "$cache/tools/$key/bin/"* "$bin.partial/"; done
    mv "$bin.partial" "$bin"
    find "$cache" -maxdepth 1 -name "bin-$set-[0-9a-f]*" ! -path "$bin" -exec rm -rf {} + 2>/dev/null || true
  fi
  [ $only_dir = 1 ] || echo "[tools] ready in $(elapsed "$started") ($set:$names): $bin" >&2
  echo "$bin"
}

main "$@"
