#!/usr/bin/env bash
# graphsafe's vLLM targets on a GPU machine, one vLLM release per process tree:
#   bash benchmarks/vllm_gpu.sh PART OUTDIR [ARGS...]
# PART: smoke RELEASE (every vLLM target, 10 examples, seed 0), campaign RELEASE [campaign args] (the campaign:
#       200 examples, 3 seeds, explored captures, isolated; ARGS go to benchmarks/vllm_campaign.py),
#       tests RELEASE (the vLLM tests of the test suite marked cuda, on this GPU: the stand-in tests' CPU checks
#       leave Triton's interpreter set-up in the process, and vLLM failed after them).
# RELEASE: 0.26 or 0.33.  vLLM comes from the environment when it imports there; else from a bundle of its
# Python tree, $VL/site026.tgz or $VL/site033.tgz (VL defaults to .vl), unpacked onto PYTHONPATH, with a copy of
# vLLM's model-info cache $VL/cache026 or $VL/cache033 as VLLM_CACHE_ROOT (so that ModelConfig need not import
# model code that calls vLLM's compiled ops).  GRAPHSAFE_DB (default /tmp/graphsafe-db) is kept when set.
# Each step's log and wall time go to OUTDIR, result JSONs too.
set -u
part=${1:?usage: bash benchmarks/vllm_gpu.sh smoke|campaign|tests RELEASE OUTDIR [ARGS...]}
rel=${2:?RELEASE: 0.26 or 0.33}; out=${3:-/tmp/vllm-gpu}; shift 3 || shift $#
mkdir -p "$out"
export PYTHONUNBUFFERED=1 GRAPHSAFE_DB=${GRAPHSAFE_DB:-/tmp/graphsafe-db}
py=${PYTHON:-python3}
tag=0${rel#0.}; tag=${tag%%.*}  # 0.26 -> 026
VL=${VL:-.vl}
if ! $py -c "import vllm" 2>/dev/null; then
  [[ -f $VL/site$tag.tgz ]] || { echo "vllm does not import and $VL/site$tag.tgz is missing"; exit 2; }
  site=/tmp/vllm-site$tag
  [[ -d $site/vllm ]] || { mkdir -p "$site" && tar -xzf "$VL/site$tag.tgz" -C "$site"; }
  cache=/tmp/vllm-cache$tag.$$  # a copy per process: campaigns of one release may run side by side
  rm -rf "$cache" && cp -r "$VL/cache$tag" "$cache"
  export PYTHONPATH=$site:${PYTHONPATH:-} VLLM_CACHE_ROOT=$cache
fi
step() {  # step NAME SECONDS CMD...: run CMD with a time limit, log and wall time in OUTDIR/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s.%N) t1
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  echo "rc=$rc wall_s=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" >> "$out/$name.log"
  tail -1 "$out/$name.log"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
case $part in
  smoke)
    step "smoke$tag" "${LIMIT:-240}" $py benchmarks/vllm_campaign.py --examples 10 --seeds 0 --timeout 200 \
      --out "$out/smoke$tag" "$@" ;;
  campaign)
    step "campaign$tag" "${LIMIT:-540}" $py benchmarks/vllm_campaign.py --out "$out/campaign$tag" "$@" ;;
  tests)
    step "tests$tag" "${LIMIT:-300}" $py -m pytest -q -p no:randomly -p no:cacheprovider -n 0 -m cuda -rs \
      tests/unit/vllm tests/integration/test_vllm.py ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
