#!/usr/bin/env bash
# The GPU check, one command on a CUDA machine, a few minutes:  make gpu-check
# (= make setup-gpu, then this script). No hub: the real model is SmolLM2-135M-Instruct from its
# pinned registry wheel (training/pretrained.py), what users run; the gpu-marked tests use the
# tiny seed models the tests build themselves.
#   1. the gpu-marked tests: vLLM (greedy n>1, per-prompt seeds, a regex, a reload and a version
#      switch at 0.85 of the device, with their times) and the transformers engine in bf16;
#   2. the real-model vLLM tests (tests/test_vllm_cpu.py runs them on CPU; here on the GPU with
#      sleep mode: the same checks, in-memory weights and the switch times);
#   3. one short SOAR search on SmolLM2 with each engine (transformers bf16, then vLLM),
#      printing solved / programs / wall time side by side.
# Everything it prints is also written under $OUT (default runs/gpu-check/).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/gpu-check}
SAMPLES=${SAMPLES:-32}  # programs sampled per task in the SOAR search (+ half as many refinements)
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
export RATCHET_TEST_MODELS=${RATCHET_TEST_MODELS:-$HOME/.cache/ratchet/test-models}  # reuse the test models between runs

{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  $PY -c "import torch, vllm, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| vllm', vllm.__version__, '| transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/machine.txt"

echo "== gpu-marked tests"
set +e
$PY -m pytest -m gpu tests/test_vllm_gpu.py -q -rA -s -p no:cacheprovider 2>&1 | tee "$OUT/pytest.txt"
tests_rc=${PIPESTATUS[0]}
echo "== real-model vLLM tests (SmolLM2)"
$PY -m training.pretrained fetch smollm2-135m-instruct
RATCHET_VLLM_ANY_DEVICE=1 $PY -m pytest tests/test_vllm_cpu.py -q -rA -s -p no:cacheprovider 2>&1 | tee "$OUT/pytest-real.txt"
real_rc=${PIPESTATUS[0]}
set -e

# The SOAR search: the demo tasks with SmolLM2 (chat prompts), one iteration (no learning),
# controls off, a small budget.
soar() {  # engine, engine_kwargs
  local name=gpu-check-$1-$(date +%s)
  local started=$(date +%s)
  $PY -m ray_jobs.soar --config configs/soar-demo.yaml --iterations 1 \
      experiment="$name" runs_dir="$OUT/runs" model.checkpoint=pretrained:smollm2-135m-instruct \
      sampler.engine="$1" sampler.engine_kwargs="$2" sampler.num_cpus_per_actor=1 \
      search.samples_per_task="$SAMPLES" search.refinements_per_task=$((SAMPLES / 2)) \
      controls.measure_models=false controls.random_prior=false controls.seed_only=false \
      2>&1 | tee "$OUT/soar-$1.txt" | { grep -v "programs:" || true; } || return 1
  echo "soar $1: $(( $(date +%s) - started )) s end to end (seed model build and Ray start included)" | tee -a "$OUT/summary.txt"
  grep "^iteration" "$OUT/soar-$1.txt" | sed "s/^/soar $1: /" | tee -a "$OUT/summary.txt"
}
echo "== SOAR search, transformers bf16"
set +e
soar transformers "{dtype: bfloat16, device: cuda}"; hf_rc=$?
echo "== SOAR search, vLLM"
soar vllm "{}"; vllm_rc=$?
set -e

echo "== summary (also in $OUT/summary.txt)"
grep -E "vllm load times|passed|failed|error" "$OUT/pytest.txt" | tail -5 | tee -a "$OUT/summary.txt"
grep -E "weight switch|passed|failed|error" "$OUT/pytest-real.txt" | tail -3 | tee -a "$OUT/summary.txt"
echo "gpu tests rc=$tests_rc, real-model tests rc=$real_rc, soar transformers rc=$hf_rc, soar vllm rc=$vllm_rc" | tee -a "$OUT/summary.txt"
[ "$tests_rc" = 0 ] && [ "$real_rc" = 0 ] && [ "$hf_rc" = 0 ] && [ "$vllm_rc" = 0 ]
