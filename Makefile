# Build, check and test the workspace. `make help` lists the targets.
CARGO ?= cargo

.PHONY: help build lint test fuzz crds deps demo up down bench-binding bench-agent bench-delivery bench-plan bench-status-cache bench-transport-cache
WECS ?= 2
STACK = $(CARGO) run -q -p ks-tests --bin ks-stack --
# ks-stack as `cargo test` builds it (`cargo run` would build it again, with other features).
KS_STACK = $${CARGO_TARGET_DIR:-target}/debug/ks-stack

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

build: ## Build the binaries (target/debug/ks-hub, ks-addon, ks-agent, kubectl-kubestellar)
	$(CARGO) build --workspace --bins

lint: ## cargo fmt --check and clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The upstream components (make deps) and the test binaries are built side by side: each build has
# long stretches on one core (module downloads, links), so on a cold 2-core machine the two together
# take less than one after the other (docs/bench/log.md, "make test's layout").
# The stack test binaries then share one stack: the first starts it, the others attach to it, and it
# is stopped at the end unless it was running before (`make up`); each starting and stopping its
# own costs more than attaching. The convergence test runs with the seed CONVERGENCE_SEED: the same
# operations every run (`make soak` draws new ones).
CONVERGENCE_SEED ?= 20261206

test: ## Everything: unit, property, CRD and upstream-compatibility tests, binary checks, stack tests
	deps/build.sh all & deps=$$!; $(CARGO) test --workspace --no-run; built=$$?; wait $$deps && exit $$built
	@running=$$($(KS_STACK) status | grep -c 'running (pid'); \
	 KS_KEEP_STACK=1 KS_CONVERGENCE_SEED=$${KS_CONVERGENCE_SEED:-$(CONVERGENCE_SEED)} $(CARGO) test --workspace; tested=$$?; \
	 [ "$$running" -gt 0 ] || $(KS_STACK) down; exit $$tested

# Seconds each fuzz target runs for in `make fuzz` (`make test` runs each for 2).
FUZZ_SECONDS ?= 60

fuzz: ## Fuzz the template engine, JSONPath subset, label selectors, CEL compilation and its cost estimate (FUZZ_SECONDS each)
	FUZZ_SECONDS=$(FUZZ_SECONDS) $(CARGO) test --release -p ks-hub --test fuzz --test cel_estimate -- --nocapture --test-threads 1

crds: ## Regenerate config/crds/ from the Rust API types
	KS_UPDATE_CRDS=1 $(CARGO) test -p ks-shared --test crd_drift committed_crds_match_the_types

deps: ## Build the pinned upstream components (deps/versions.env) into ~/.cache/kubestellar-rs
	deps/build.sh all

demo: deps build ## On a fresh machine: build everything, start the stack, run the quickstart workload and show what happened
	$(STACK) up --wecs $(WECS)
	$(CARGO) run -q -p ks-tests --bin ks-demo

up: deps build ## Start the local stack in .stack/ (WECS=n for n WECs; idempotent)
	$(STACK) up --wecs $(WECS)

down: ## Stop every process of the local stack
	$(STACK) down

# Seconds `make soak` generates operations for (the test's own default is 150).
SECONDS ?= 1800

.PHONY: soak
soak: up ## The generated convergence test against the stack for SECONDS (default 1800), after make up
	KS_KEEP_STACK=1 KS_CONVERGENCE_SECONDS=$(SECONDS) $(CARGO) test -p ks-tests --test convergence

bench-binding: build ## Time BindingPolicy change -> Binding write on the running stack (make up first)
	$(CARGO) run -q -p ks-tests --bin ks-bench -- binding-latency --changes 20

bench-agent: build ## WEC status change -> WorkStatus latency, agent memory at 1,000 objects and over churn (make up first)
	$(CARGO) run -q -p ks-tests --bin ks-bench -- agent-latency --changes 50 --objects 1000
	$(CARGO) run -q -p ks-tests --bin ks-bench -- agent-churn --rounds 5 --works 20

bench-delivery: build ## Time WDS create -> present on every WEC for 50 Deployments (make up first)
	$(CARGO) run -q -p ks-tests --bin ks-bench -- delivery-latency --objects 50

.PHONY: images
images: ## OCI image archives of ks-hub, ks-addon, ks-agent (release build): target/images/<name>.oci.tar
	images/build.sh

.PHONY: bench-status
bench-status: build ## Time WEC status change -> WDS .status for 50 changes, writes per change (make up first)
	$(CARGO) run -q -p ks-tests --bin ks-bench -- status-latency --changes 50

# Where cargo puts its builds: target/, or $(CARGO_TARGET_DIR) when set.
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
# `make bench` runs in parts, each under an hour here at full scale: SCENARIO=latency, bulk,
# objects, objects-large (the objects curve's largest point, apart), wecs, agent or churn
# (comma-separated for several; empty for all, several hours). Each part writes
# docs/bench/<part>.json, and docs/benchmarks.md is written again from every part's results; the
# curves also after each of their runs, marked as stopped before the end until it comes.
# QUICK=1: small knobs, a few minutes per part; the default is the full run (knobs in
# `ks-bench compare --help`).
SCENARIO ?=
ifeq ($(QUICK),1)
BENCH_KNOBS ?= --repeats 1 --objects 10 --changes 10 --bulk-objects 200 --namespaces 4 --simulated-wecs 4 \
	--curve-objects 100,200 --curve-objects-large 400 --curve-wecs-fixed 6 --curve-wecs 4,8,12 --curve-wec-objects 100 --idle 10 \
	--upstream-cap-minutes 2 --ours-cap-minutes 5 --agent-objects 1000 --agent-cycles 1000 --agent-pods 250
else
BENCH_KNOBS ?=
endif

.PHONY: bench bench-tracing bench-write-cost
bench: deps ## Ours vs upstream KubeStellar v0.30.0 on a fresh stack, in parts (SCENARIO=latency|bulk|objects|objects-large|wecs|agent|churn; QUICK=1 small); writes docs/benchmarks.md
	deps/build.sh kubestellar
	$(CARGO) build --release --workspace --bins
	$(TARGET_DIR)/release/ks-stack down
	rm -rf .stack
	$(TARGET_DIR)/release/ks-stack up --wecs 2
	$(TARGET_DIR)/release/ks-bench compare $(if $(SCENARIO),--scenario $(SCENARIO)) $(BENCH_KNOBS)

bench-plan: ## Time and peak memory of the transport's plan of one Binding: 10,000 objects to 12 and to 52 WECs (no stack)
	BENCH_OBJECTS=10000 BENCH_WECS=12 $(CARGO) test -q --release -p ks-hub --lib bench_plan_at_scale -- --ignored --nocapture
	BENCH_OBJECTS=10000 BENCH_WECS=52 $(CARGO) test -q --release -p ks-hub --lib bench_plan_at_scale -- --ignored --nocapture

bench-status-cache: ## Heap the status controller holds per WEC report: 10,000 objects on 2 WECs (no stack)
	$(CARGO) test -q --release -p ks-hub --lib bench_report_cache -- --ignored --nocapture

bench-transport-cache: ## Heap the transport's ManifestWork cache holds per object: 10,000 objects to 12 WECs (no stack)
	$(CARGO) test -q --release -p ks-hub --lib bench_work_cache -- --ignored --nocapture

bench-tracing: build ## Delivery and status latency with the hub's tracing off and on, alternating (make up first)
	$(CARGO) run -q -p ks-tests --bin ks-bench -- tracing-overhead --rounds 2 --objects 30 --changes 30

bench-write-cost: build ## ITS apiserver CPU per way of writing a ManifestWork (create, apply, JSON patch), with and without OCM's status (make up first)
	$(CARGO) run -q -p ks-tests --bin ks-bench -- write-cost
