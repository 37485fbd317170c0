# The two entry points a fresh machine needs (cargo and go are preinstalled on it); see README.md.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: demo test test-containerd-window bench lint tools up up-node manifests image dist version fuzz mutants install

## demo: start the local control plane, publish a sample registry, follow a change, stop everything. Builds the
## demo's tools only (hack/tools.sh demo: Kubernetes 1.36 and its node, etcd, kwok, containerd, runc, the CNI plugins,
## CoreDNS, crane), not the tested window's nor the release tooling
demo:
	@tools=$$(hack/tools.sh demo) && \
	  echo "[demo] building the controller" && \
	  $(CARGO) build --quiet --bin local-registry-publisher -p local-registry-publisher && \
	  LRP_TOOLS_DIR=$$tools $(CARGO) run --quiet -p testbed -- demo target/debug/local-registry-publisher

## test: build the tools and the controller image if needed, then run every unit and integration test on the main
## pin, the cluster test files again on the tested window's other ends (the chart's floor and the newest minor), and
## the node agent's real-node tests again on containerd 1.7 and 2.3 and, with the loopback pushes' tests, with kube-proxy in
## nftables mode.
## The windows' other ends (hack/tools.sh window) are built in the background while the main pin's tests run
## (their log: target/tools-window.log), since only the last runs use them
# Integration tests mostly wait on the cluster, so more threads than cores shortens the run.
CLUSTER_TESTS := --test smoke --test publisher --test tenancy --test addresses --test failures --test operations \
	--test outage --test chart --test pull_secrets --test cli
KUBE_WINDOW := 1.25 1.37
# The node agent's real-node tests (name filters over real_node and containerd_config), run again on other containerd
# releases than the main pin (2.4): `make test` on the window's oldest end and on 2.3, what kind, k3s and minikube ship
# today; `make test-containerd-window` on each, recording the run in docs/containerd-window.md.
NODE_AGENT_TESTS := --test real_node --test containerd_config --test two_nodes -- --test-threads=8 node_agent \
	edit_cannot_redirect admins_mirror pull_keeps_working doctor_reads_each_nodes config_path ipv6_host_entry \
	runtime_conformance the_relay_serves
CONTAINERD_RERUN := 1.7 2.3
# kube-proxy modes besides the main one (iptables) the node agent's real-node tests run again on: nftables (GA since
# 1.33, Talos's default, a kind and k0s option) serves no NodePort on the node's loopback, which the agent's files
# must make up for (docs/node-pulls.md).
PROXY_RERUN := nftables
# What runs again on those modes: the node agent's tests, and the publisher's: where a tool on the node pushes to a
# loopback address (a nodePort there, served in iptables mode only, and a hostPort, served in every mode), the
# hardened pod, upgrade and uninstall. Not the NodePort KEP flow (a_nodeport_registry_...): it pushes from the node to
# localhost:<nodePort>, which nftables mode refuses, as tools_on_the_node_push proves in both modes.
PROXY_TESTS := $(NODE_AGENT_TESTS) tools_on_the_node_push minikubes_hostport_registry the_chart_runs_hardened \
	helm_upgrade_of_a_single_replica helm_uninstall_stops with_withdraw_on_uninstall_off
# The node agent's real-node tests that hold for any runtime, run again on a CRI-O node (LRP_NODE_RUNTIME=crio)
# after the CRI-O node's own (crio_node). Not rerun there, each for a reason of CRI-O's: the loopback nodePort's
# tests (CRI-O dials HTTPS to a loopback nodePort, crio_node proves the drop-in's way; and CRI-O 1.36 takes no IPv6
# literal in an image name: "parse image name: invalid reference format"), containerd's config_path and
# containerd_config's (CRI-O's check is its auto-reload, in crio_node), the mirrors' and the TLS registry's with
# the agent on (they read containerd's file and log; crio_node has CRI-O's), and the two-node tests (one CRI-O node).
CRIO_RERUN_TESTS := --test real_node -- --test-threads=8 without_the_node_agent \
	the_node_agent_maps_a_published_cluster_dns_name the_node_agents_file_follows the_node_agent_leaves_a_foreign_file \
	the_node_agent_removes_the_file the_node_agent_turned_off the_node_agent_makes_a_kind_shaped_host \
	a_pull_keeps_working doctor_reads_each_nodes doctor_shows_why
CONTAINERD_WINDOW := 1.7 2.2 2.3 2.4
test: image
	@main=$$(hack/tools.sh main) || exit 1; \
	echo "[test] building the tested windows' other ends in the background (target/tools-window.log)"; \
	setsid hack/tools.sh window >target/tools-window.log 2>&1 & window=$$!; \
	echo "$(CARGO) test --workspace --no-fail-fast -- --test-threads=8"; \
	LRP_TOOLS_DIR=$$main $(CARGO) test --workspace --no-fail-fast -- --test-threads=8; status=$$?; \
	if [ $$status != 0 ]; then kill -- -$$window 2>/dev/null; exit $$status; fi; \
	echo "[test] waiting for the windows' tools"; \
	wait $$window || { tail -n 40 target/tools-window.log >&2; echo "[test] hack/tools.sh window failed" >&2; exit 1; }
	@echo "[test] the windows' runs in two lanes at once, each on clusters of its own (target/window-*.log)"; \
	started=$$(date +%s); \
	( for minor in $(KUBE_WINDOW); do \
	    echo "[test] the cluster test files against Kubernetes $$minor"; \
	    LRP_KUBE_VERSION=$$minor $(CARGO) test --no-fail-fast $(CLUSTER_TESTS) -- --test-threads=8 || exit 1; \
	  done ) >target/window-kubernetes.log 2>&1 & kubernetes=$$!; \
	( echo "[test] the CRI-O node's tests"; \
	  $(CARGO) test --no-fail-fast --test crio_node || exit 1; \
	  echo "[test] the node agent's real-node tests on a CRI-O node"; \
	  LRP_NODE_RUNTIME=crio $(CARGO) test --no-fail-fast $(CRIO_RERUN_TESTS) || exit 1; \
	  for release in $(CONTAINERD_RERUN); do \
	    echo "[test] the node agent's real-node tests on containerd $$release"; \
	    LRP_CONTAINERD=$$release $(CARGO) test --no-fail-fast $(NODE_AGENT_TESTS) || exit 1; \
	  done; \
	  for mode in $(PROXY_RERUN); do \
	    echo "[test] the node agent's and the publisher's real-node tests with kube-proxy in $$mode mode"; \
	    LRP_KUBE_PROXY=$$mode $(CARGO) test --no-fail-fast $(PROXY_TESTS) || exit 1; \
	  done ) >target/window-node.log 2>&1 & node=$$!; \
	status=0; \
	for lane in kubernetes node; do \
	  pid=$$kubernetes; [ $$lane = node ] && pid=$$node; \
	  wait $$pid; lane_status=$$?; \
	  echo "[test] lane $$lane: exit $$lane_status after $$(( $$(date +%s) - started ))s; its log:"; \
	  cat target/window-$$lane.log; \
	  [ $$lane_status = 0 ] || status=$$lane_status; \
	done; \
	if [ $$status != 0 ]; then \
	  echo "[test] what failed in the lanes (each test's panic, in full above):"; \
	  grep -h -A6 -E '^---- .* stdout ----$$' target/window-*.log | grep -v '^ *[0-9]*: \|^ *at ' | cut -c1-400; \
	fi; \
	exit $$status

## test-containerd-window: the node agent's real-node tests on every containerd release of the window (1.7, 2.2, 2.3
## and the main pin 2.4: what kind, k3s, minikube and MicroK8s ship), building 2.2, which `make test` does not; when
## all pass, records each release and its count of passed tests in docs/containerd-window.md (commit it)
test-containerd-window: image
	CARGO=$(CARGO) hack/containerd-window.sh $(CONTAINERD_WINDOW)

## install: the CLI into $(PREFIX)/bin (default ~/.local/bin), with the kubectl plugin name beside it
PREFIX ?= $(HOME)/.local
install:
	$(CARGO) build --release --locked --quiet --bin local-registry-publisher -p local-registry-publisher
	install -D -m 0755 target/release/local-registry-publisher "$(DESTDIR)$(PREFIX)/bin/local-registry-publisher"
	ln -sf local-registry-publisher "$(DESTDIR)$(PREFIX)/bin/kubectl-registry_hosting"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; *) echo "[install] add $(PREFIX)/bin to PATH: export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac

## image: the controller's OCI image from the release binary, without a Docker engine (target/image/). ARCH is the
## image's architecture (amd64, arm64) and must be this machine's: the release builds each on its own runner, as no
## cross standard library is installed here. SOURCE_URL (default: the git remote "origin") and the commit annotate it.
HOST_ARCH := $(patsubst x86_64,amd64,$(patsubst aarch64,arm64,$(shell uname -m)))
ARCH ?= $(HOST_ARCH)
SOURCE_URL ?= $(shell git remote get-url origin 2>/dev/null)
REVISION := $(shell git rev-parse HEAD 2>/dev/null)
image:
	@[ "$(ARCH)" = "$(HOST_ARCH)" ] || { echo "make image ARCH=$(ARCH): this machine builds $(HOST_ARCH) only; build $(ARCH) on a $(ARCH) machine (docs/development.md)" >&2; exit 2; }
	$(CARGO) build --release --quiet --bin local-registry-publisher -p local-registry-publisher
	$(CARGO) run --quiet -p xtask -- image target/release/local-registry-publisher target/image --arch $(ARCH) \
	  $(if $(REVISION),--annotation org.opencontainers.image.revision=$(REVISION)) \
	  $(if $(SOURCE_URL),--annotation org.opencontainers.image.source=$(SOURCE_URL))

## dist: the release artifacts for the crate's version in target/dist: the packaged chart, the image as an OCI
## layout archive, the CLI archive, a CycloneDX SBOM and SHA256SUMS (hack/dist.sh; IMAGE_REPOSITORY sets the
## packaged chart's default image, as the release workflow does)
dist: tools image
	hack/dist.sh all target/dist

## bench: latency, memory and failover on the local control plane against a Go baseline, the node agents at 1, 10
## and 100 nodes, the loopback relay on the real node against pulling straight from the ClusterIP, and the probes'
## port under a flood of connections and TLS handshakes against the same run quiet; writes
## docs/benchmarks.md
bench: tools
	$(CARGO) build --release --quiet --bin local-registry-publisher -p local-registry-publisher
	LRP_BASELINE=$$(hack/baseline.sh) $(CARGO) bench --profile bench-harness --bench publish --bench failover --bench node_agent --bench node_agents --bench relay --bench http_load

## fuzz: the value grammar's properties (src/hosting/grammar_tests.rs) over many more generated inputs than make test runs
fuzz:
	PROPTEST_CASES=$${PROPTEST_CASES:-200000} $(CARGO) test --lib hosting::grammar_tests

## mutants: cargo-mutants over the pure core (src/pure.md) in six parts (MUTANTS_PART: core = hosting, publish, keys,
## settings, watching; registry; node (with its api); agent = the agent's state derivation and containerd's files and
## config; pull; cli = doctor's pure parts), and a seventh, shell = the decisions that sit beside I/O (escape,
## health, the flag and selector parsers, the Event poster's, the agent's plan following, metrics auth), chosen per
## function, with the library's unit, property and grammar tests, in one run; each part's summary (the commit,
## caught, missed, timeouts, unviable, the score per module, why each missed mutant is left) is kept in
## docs/mutants/<part>.md, every mutant's name and outcome in docs/mutants/<part>.outcomes.txt. About two hours for
## all on 2 cores, testing two mutants at once (MUTANTS_JOBS), so not part of `make test` or CI.
MUTANTS_PART ?= core registry node agent crio pull cli shell
MUTANTS_JOBS ?= 2
mutants:
	MUTANTS_JOBS=$(MUTANTS_JOBS) hack/mutants.sh $(MUTANTS_PART)

## lint: formatting, clippy, every dependency's license and RustSec advisories (cargo-deny, deny.toml), and the
## GitHub workflows (actionlint, with shellcheck over their scripts), as CI runs them
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --test crio_node -- -D warnings
	hack/deny.sh
	"$$(hack/tools.sh actionlint)/actionlint" -shellcheck "$$(command -v shellcheck)"

## version: move the crate, the chart, the manifests, the Dockerfile and the CHANGELOG to VERSION (hack/version.sh)
version:
	@[ -n "$(VERSION)" ] || { echo "usage: make version VERSION=x.y.z" >&2; exit 2; }
	hack/version.sh $(VERSION)

## manifests: render deploy/ from the chart's default values, the chart's README from values.yaml and its NodePullState
## CRD from the Rust type (tests fail when any is stale)
manifests:
	$(CARGO) run --quiet --bin local-registry-publisher -p local-registry-publisher -- crd > charts/local-registry-publisher/crds/nodepullstates.yaml
	$(CARGO) run --quiet -p xtask -- values-docs charts/local-registry-publisher > charts/local-registry-publisher/README.md
	{ echo "# Rendered from charts/local-registry-publisher with default values by 'make manifests'; do not edit."; \
	  "$$(hack/tools.sh helm)/helm" template local-registry-publisher charts/local-registry-publisher \
	    --namespace local-registry-publisher --no-hooks; } > deploy/local-registry-publisher.yaml

## tools: build the pinned Go tools into ~/.cache/local-registry-publisher (minutes cold, instant warm)
tools:
	@hack/tools.sh >/dev/null

## up: start the local control plane for debugging and print its KUBECONFIG (the demo's tools and helm)
up:
	@tools=$$(hack/tools.sh demo helm) && LRP_TOOLS_DIR=$$tools $(CARGO) run --quiet -p testbed -- up

## up-node: the same with a real node (containerd, kubelet, kube-proxy, CoreDNS); needs root and cgroups
up-node:
	@tools=$$(hack/tools.sh demo helm) && LRP_TOOLS_DIR=$$tools $(CARGO) run --quiet -p testbed -- up --real-node
