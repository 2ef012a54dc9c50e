# The two commands a new user needs: `make demo` and `make test`.
# Each sets itself up idempotently: a .venv with the package and its test
# extras, and (as root) the Debian packages the CNI tier and the demo need.

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
PYTHON  ?= python3
CNI_BIN ?= /usr/lib/cni

.PHONY: demo test setup system-deps lint bench bench-agent bench-podstart bench-dra soak clean conformance-report uninstall

demo: setup
	$(VENV)/bin/podnetwork demo

# pytest runs on TEST_WORKERS pytest-xdist workers: most of the suite waits (the API emulator's
# round trips, processes starting, polling), so more workers than the 2 cores CI has pay off.
# The CNI and e2e tiers form one group that one worker runs in order (tests/README.md, "How the
# suite runs"). TEST_WORKERS=0 runs everything in this one process, in order.
TEST_WORKERS ?= 4

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --durations=15

setup: $(STAMP) system-deps

# Reinstalled whenever pyproject.toml changes (new dependency or subcommand).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# The real CNI plugins and `ip` (the CNI tier, the demo), `nft` (the agent's MultiNetworkPolicy
# tables in pods, bridge/agent/netns/nftables.py, and their CNI tests), `conntrack` (flushing UDP flows to a
# Service endpoint that left, bridge/agent/netns/clusterips.py), Graphviz's `dot` (`podnetwork graph
# -o graph.svg`, as the README shows it), and a C compiler with a static libc (the compiled CNI
# shim, which `cni-agent --install` builds and its tests run), and for the real tier's kubelet node
# (tests/real/, on the kit in ../shared/k8s) containerd and runc, with openssl, curl and xz for the
# kit's scripts, and mmdebstrap (tests/real/test_deploy_on_node.py packs the image from Debian's
# packages, tests/real/image_support.py). Only what is missing is installed; without root we
# cannot install it: say so, and let the demo run its control-plane part and the CNI tests report it.
system-deps:
	@missing=""; \
	{ [ -x $(CNI_BIN)/bridge ] && [ -x $(CNI_BIN)/host-local ]; } || missing="$$missing containernetworking-plugins"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	command -v nft >/dev/null || missing="$$missing nftables"; \
	command -v conntrack >/dev/null || missing="$$missing conntrack"; \
	command -v dot >/dev/null || missing="$$missing graphviz"; \
	command -v cc >/dev/null || missing="$$missing gcc"; \
	command -v containerd >/dev/null || missing="$$missing containerd"; \
	command -v runc >/dev/null || missing="$$missing runc"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v xz >/dev/null || missing="$$missing xz-utils"; \
	command -v mmdebstrap >/dev/null || missing="$$missing mmdebstrap"; \
	[ -f "$$(cc -print-file-name=libc.a 2>/dev/null)" ] || missing="$$missing libc6-dev"; \
	if [ -z "$$missing" ]; then \
		:; \
	elif [ "$$(id -u)" = "0" ]; then \
		apt-get update && apt-get install -y $$missing; \
	else \
		echo "note: not root, so$$missing were not installed;" \
		     "run 'sudo apt-get install -y$$missing' for the CNI parts and SVG graphs"; \
	fi

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# Benchmarks report ratios against a baseline measured in the same run
# (docs/benchmarks.md). The agent benchmarks need root, bench_agent also the CNI plugins,
# bench_nftables and bench_services also nftables.
bench: setup
	$(PY) benchmarks/bench_controller_inuse.py
	$(PY) benchmarks/bench_service_slices.py
	$(PY) benchmarks/bench_extender.py --repeats 3
	$(PY) benchmarks/bench_extender_throughput.py --variants --prioritize
	$(PY) benchmarks/bench_extender_kube.py
	$(MAKE) bench-agent
	$(PY) benchmarks/bench_routes.py
	$(PY) benchmarks/bench_nftables.py
	$(PY) benchmarks/bench_services.py
	$(PY) benchmarks/bench_addresswatch.py
	$(PY) benchmarks/bench_lite.py

# The KEP-3698 conformance suite (--profile extended) against this project's components on the
# API emulator of the tests; the report goes to docs/conformance/ (docs/conformance.md).
conformance-report: setup
	$(PY) -m tests.api.conformance_support

# The CNI agent against the plugins executed directly (docs/benchmarks.md, "CNI agent"):
# ADD and DEL, 1-3 attachments, 10 pods at once, per-phase breakdown, RSS over 1,000 pods.
# Root and the CNI plugins; ~5 minutes on 2 cores.
# First the default install, the compiled shim (`--compiled-shim`, which needs cc: what
# `cni-agent --install` and the DaemonSet install), with the two shims compared; then the
# Python shim (the fallback).
bench-agent: setup
	$(PY) benchmarks/bench_agent.py --compiled-shim --compare-shims
	$(PY) benchmarks/bench_agent.py --rss-pods 0

# Pod start on a real kubelet (docs/benchmarks.md, "Pod start on a real kubelet"): the default
# network alone, Multus thick and podnetwork, one after the other in one cluster of the kit
# (../shared/k8s); 1 pod 5 times, 20 at once, 100 in 5 waves of 20, each. Root, containerd, runc, the
# CNI plugins; ~7 minutes on 2 cores. Smaller: `$(PY) benchmarks/bench_podstart.py --singles 3 --burst 10 --waves 2`.
bench-podstart: setup
	$(PY) benchmarks/bench_podstart.py --from-make

# Scheduling throughput at 1,000 fake nodes on the kit's kube-scheduler (docs/benchmarks.md, "DRA
# placement against the extender"): no network constraint, the extender, DRA claims from templates
# and DRA claims made beforehand, live and from a backlog, in one cluster; ~25 minutes on 2 busy
# cores. Smaller: `$(PY) benchmarks/bench_dra_scheduling.py --nodes 200 --pods 50 --rounds 1`.
bench-dra: setup
	$(PY) benchmarks/bench_dra_scheduling.py --nodes 1000 --pods 150 --rounds 2

# A churn soak on a kubelet node of the kit (docs/reliability.md): pods with 0-3 PodNetworks
# created and deleted for MINUTES minutes while the agent, the bridge, the controller,
# kube-apiserver, the kubelet and containerd are SIGKILLed in turn; leaks counted every 3 minutes
# and at the end; the report printed and written to SOAK_REPORT. Root, containerd, runc, the CNI
# plugins, nftables. The CI-sized run (100 pods, 10 kills) is `$(PY) tests/soak/soak.py`.
# SOAK_ARGS adds options, e.g. SOAK_ARGS="--spare agent" (kills that leave one agent process for
# the whole run, whose RSS the report follows).
MINUTES ?= 30
SOAK_REPORT ?= soak-report.json
SOAK_ARGS ?=
soak: setup
	$(PY) tests/soak/soak.py --minutes $(MINUTES) --report $(SOAK_REPORT) $(SOAK_ARGS)

# Removes podnetwork from the cluster kubectl points at, as docs/deploy.md "Uninstall" says:
# idempotent, every wait bounded (UNINSTALL_TIMEOUT seconds, default 120). UNINSTALL_ARGS=--keep-npwg-crds
# keeps the NetworkAttachmentDefinition and MultiNetworkPolicy CRDs (a cluster that had them first).
uninstall:
	deploy/uninstall.sh $(UNINSTALL_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis .benchmarks
