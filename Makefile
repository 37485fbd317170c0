# The two entry points a fresh machine needs (cargo and go are preinstalled on it); see README.md.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: demo test bench lint tools up up-node manifests image fuzz

## demo: start the local control plane, publish a sample registry, follow a change, stop everything
demo: tools
	$(CARGO) build --quiet --bin local-registry-publisher -p local-registry-publisher
	$(CARGO) run --quiet -p testbed -- demo target/debug/local-registry-publisher

## test: build the tools and the controller image if needed, then run every unit and integration test
# Integration tests mostly wait on the cluster, so more threads than cores shortens the run.
test: tools image
	$(CARGO) test --workspace -- --test-threads=8

## image: the controller's OCI image from the release binary, without a Docker engine (target/image/)
image:
	$(CARGO) build --release --quiet --bin local-registry-publisher -p local-registry-publisher
	$(CARGO) run --quiet -p testbed -- image target/release/local-registry-publisher target/image

## bench: latency, memory and failover on the local control plane against a Go baseline; writes docs/benchmarks.md
bench: tools
	$(CARGO) build --release --quiet --bin local-registry-publisher -p local-registry-publisher
	LRP_BASELINE=$$(hack/baseline.sh) $(CARGO) bench --profile bench-harness --bench publish --bench failover

## fuzz: the value grammar's properties (tests/grammar.rs) over many more generated inputs than make test runs
fuzz:
	PROPTEST_CASES=$${PROPTEST_CASES:-200000} $(CARGO) test --test grammar

## lint: formatting and clippy, as CI runs them
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## manifests: render deploy/ from the chart's default values and the chart's README from values.yaml (tests fail when either is stale)
manifests: tools
	$(CARGO) run --quiet -p testbed -- values-docs charts/local-registry-publisher > charts/local-registry-publisher/README.md
	{ echo "# Rendered from charts/local-registry-publisher with default values by 'make manifests'; do not edit."; \
	  "$$(hack/tools.sh --dir)/helm" template local-registry-publisher charts/local-registry-publisher \
	    --namespace local-registry-publisher --no-hooks; } > deploy/local-registry-publisher.yaml

## tools: build the pinned Go tools into ~/.cache/local-registry-publisher (minutes cold, instant warm)
tools:
	@hack/tools.sh >/dev/null

## up: start the local control plane for debugging and print its KUBECONFIG
up: tools
	$(CARGO) run --quiet -p testbed -- up

## up-node: the same with a real node (containerd, kubelet, kube-proxy, CoreDNS); needs root and cgroups
up-node: tools
	$(CARGO) run --quiet -p testbed -- up --real-node
