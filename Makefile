# ratchet: every target installs what it needs, so on a fresh machine `make demo` or
# `make test` alone does all set-up (virtualenv, pip packages, redis-server).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.ratchet-installed
# Offline by design: nothing may fetch weights or datasets from a hub at run time.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export TOKENIZERS_PARALLELISM := false
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: setup setup-gpu system-packages demo demo-sft demo-scaling demo-tpo seeds test test-all bench lint redis-down clean

setup: $(STAMP) system-packages

# CPU set-up: the local CPU wheel torch==2.13.0 first; pyproject's torch range is then
# satisfied and pip pulls no CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]' --config-settings editable_mode=compat
	touch $@

# GPU machines: vLLM brings the torch it pins (within pyproject's range).
setup-gpu:
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -e '.[gpu,dev]' --config-settings editable_mode=compat
	touch $(STAMP)

# redis-server for the local store; libseccomp2 for the ARC sandbox's system-call filter.
system-packages:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ldconfig -p | grep -q 'libseccomp\.so\.2' || missing="$$missing libseccomp2"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  case "$$missing" in *redis-server*) service redis-server stop >/dev/null 2>&1 || true;; esac; \
	fi  # a freshly installed distro redis service would sit on 6379, Ray's port: ratchet starts its own

# The SOAR demo: the seed model (built on first use, then cached), 2 iterations of search and
# hindsight learning, each model and the controls measured on 3 sampling seeds.
demo: setup
	$(PY) -m ray_jobs.soar --config configs/soar-demo.yaml --iterations 2

# The foundation demo: SFT of a tiny seed model as a Ray task, published and sampled.
demo-sft: setup
	$(PY) -m ray_jobs.sft_demo

# Scaling curves of sampling-based search with self-verification on arithmetic word problems.
demo-scaling: setup
	$(PY) -m ray_jobs.scaling --config configs/scaling-demo.yaml

# Thought preference optimization on multi-step arithmetic: the shipped seed model, DPO
# iterations of the thought arm and of the direct-response baseline, measured on 3 seeds.
demo-tpo: setup
	$(PY) -m ray_jobs.tpo --config configs/tpo-demo.yaml

# Rebuild the embedded seed models in models/ from their recipes (training/embedded.py). Only
# when a recipe changes: every rebuild adds megabytes to the repository's history.
seeds: setup
	$(PY) -m training.embedded build

test: setup
	$(PY) -m pytest

test-all: setup
	$(PY) -m pytest -m "not gpu"

bench: setup
	$(PY) -m benchmarks

lint: setup
	$(VENV)/bin/ruff check .

redis-down:
	@if [ -x $(PY) ]; then $(PY) -m store down; else echo "no virtualenv: nothing to stop"; fi

clean:
	rm -rf runs .pytest_cache .ruff_cache
