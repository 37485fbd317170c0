# The two entry points a fresh machine needs (cargo and go are preinstalled on it); see README.md.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: demo test bench lint tools up

## demo: start the local control plane, publish a sample registry, follow a change, stop everything
demo: tools
	$(CARGO) build --quiet --bin local-registry-publisher -p local-registry-publisher
	$(CARGO) run --quiet -p testbed -- demo target/debug/local-registry-publisher

## test: build the control-plane tools if needed, then run every unit and integration test
test: tools
	$(CARGO) test --workspace --all-targets

## bench: publish latency and controller memory on the local control plane, printed (release build)
bench: tools
	$(CARGO) bench --bench publish

## lint: formatting and clippy, as CI runs them
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## tools: build the pinned Go tools into ~/.cache/local-registry-publisher (minutes cold, instant warm)
tools:
	@hack/tools.sh >/dev/null

## up: start the local control plane for debugging and print its KUBECONFIG
up: tools
	$(CARGO) run --quiet -p testbed -- up
