#!/usr/bin/env bash
# On a CUDA machine (no vLLM needed): what of the project runs there, checked on the GPU. A summary line per
# step on stdout; under $OUT (default /tmp/on-gpu) logs.tgz (one log per step) and each toy table's results.jsonl.
# Steps, most telling first:
#   hf-oracle   the transformers backend's cached, batched loop on CUDA against the from-scratch Algorithm 1
#               (backends/hf/reference.py), every method, same- and cross-family pairs (ASYMSPEC_TEST_DEVICE=cuda)
#   kernels     the Triton gate kernels compiled for this GPU against the torch reference (V = 151,936 included)
#   self-check  `asymspec-vl doctor`'s kernel self-check in bfloat16, float16 and float32
#   eval-toy    the embedded pairs' held-out tables on CUDA, to compare with the CPU's (README: 92.3 / 9.67), and
#               the same-family pair in bfloat16
#   bench-gate, bench-map   the gate step's and the vocabulary map's cost per decode step on this GPU
#   doctor-quick  `asymspec-vl doctor --quick` (8 minutes at most; only where vLLM imports: skipped otherwise)
# Wheels the machine lacks (this project's transformers 4.57 line, its tokenizers and hub client) may sit in .whl/:
# they are installed under /tmp/site first. Usage: bash tests/on_gpu.sh [STEP ...] (default: every step).
# DEV=cpu runs the same steps on the CPU (the kernels in triton's interpreter): a dry run of this script.
set -u
OUT=${OUT:-/tmp/on-gpu}
RUNS=${RUNS:-/tmp/on-gpu-runs}
DEV=${DEV:-cuda}
LOGS=$RUNS/logs
mkdir -p "$OUT" "$LOGS"
[ "$DEV" = cpu ] && export TRITON_INTERPRET=1
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
fi
$PY -c "import asymspec_vl.evals" 2>/dev/null \
  || $PY -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$LOGS/install.log" 2>&1 \
  || { echo "install failed"; tail -20 "$LOGS/install.log"; exit 1; }
$PY -c "import torch, transformers, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'| transformers', transformers.__version__, '| triton', triton.__version__, '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $LOGS/NAME.log, print rc, time, last line
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  echo "[$name] rc=$rc $((SECONDS - start)) s | $(grep -v '^\s*$' "$LOGS/$name.log" | tail -1)"
}
want() { [ $# -eq 0 ] || [[ " $* " == *" $STEP "* ]]; }

PYTEST=($PY -m pytest -q -p no:cacheprovider -m "not vllm" -o timeout=300)
STEPS=("$@")
for STEP in hf-oracle kernels self-check eval-toy bench-gate bench-map doctor-quick; do
  want "${STEPS[@]}" || continue
  case $STEP in
    hf-oracle) ASYMSPEC_TEST_DEVICE=$DEV step hf-oracle 240 "${PYTEST[@]}" tests/core/test_loop_equivalence.py \
      tests/core/test_loop_ledger.py tests/core/test_sampling_loop.py tests/core/test_logprobs.py tests/backends/hf \
      tests/test_baselines.py tests/test_api_trace.py tests/evals/toy/test_eval.py tests/toy/test_llama.py \
      --deselect tests/evals/toy/test_eval.py::test_the_demo_opens_on_toy_examples_the_pair_answers ;;  # gradio
    # kernels: test_self_check.py runs triton's interpreter on CPU tensors, which numpy >= 2.4 (the GPU image's
    # 2.5.2) breaks inside triton < 3.7 ("only 0-dimensional arrays can be converted"): CI pins numpy 2.2.
    kernels) step kernels 240 "${PYTEST[@]}" tests/core/kernels tests/core/test_gate.py tests/core/test_vocab_align.py \
      --deselect tests/core/kernels/test_self_check.py::test_the_kernel_agrees_with_the_reference_on_every_case_and_a_disagreement_is_named ;;
    self-check) for dt in bfloat16 float16 float32; do
      step "self-check-$dt" 90 $PY -m asymspec_vl.doctor.kernels self-check --dtype $dt; done ;;
    eval-toy) for v in embedded embedded-llama; do
      step "eval-toy-$v" 150 $PY -m asymspec_vl.cli eval toy --device $DEV --verifier $v --no-progress \
        --out "$RUNS/toy-$v"
      cp "$RUNS/toy-$v/results.jsonl" "$OUT/toy-$v.jsonl" 2>/dev/null; done
      step eval-toy-bf16 150 $PY -m asymspec_vl.cli eval toy --device $DEV --dtype bfloat16 --no-progress \
        --out "$RUNS/toy-bf16"
      cp "$RUNS/toy-bf16/results.jsonl" "$OUT/toy-bf16.jsonl" 2>/dev/null ;;
    bench-gate) step bench-gate 90 $PY -m asymspec_vl.evals.benchmarks.bench_gate --device $DEV ;;
    bench-map) step bench-map 90 $PY -m asymspec_vl.evals.benchmarks.bench_vocab_map --device $DEV \
      --shapes 1x2,1x4,8x4,64x8 ;;
    doctor-quick) if $PY -c "import vllm" 2>/dev/null; then
        step doctor-quick 540 $PY -m asymspec_vl.cli doctor --quick --json "$OUT/doctor-quick.json"
      else echo "[doctor-quick] skipped: vllm does not import here"; fi ;;
  esac
done

# what the steps printed that a reader needs: failures, tables
for f in "$LOGS"/*.log; do
  case $(basename "$f") in
    hf-oracle.log | kernels.log) grep -E "^(FAILED|ERROR)|passed|failed" "$f" | tail -25 ;;
    doctor-quick.log) echo "== doctor-quick.log"; grep -E "^\||quick checks" "$f" | tail -30 ;;
    eval-toy-*.log | bench-*.log) echo "== $(basename "$f")"; grep -E "^\||shared|GB/s|median|building" "$f" | tail -30 ;;
  esac
done
tar -czf "$OUT/logs.tgz" -C "$LOGS" .
