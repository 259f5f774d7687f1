#!/usr/bin/env bash
# graphsafe's SGLang targets on a GPU machine:
#   bash benchmarks/sglang_gpu.sh PART OUTDIR [ARGS...]
# PART: smoke (every SGLang target, 10 examples, seed 0), campaign [campaign args] (200 examples, seeds 0 1 2,
#       SGLang's own capture, each target isolated with a time limit per check; ARGS go to
#       benchmarks/sglang_campaign.py), tests (the SGLang tests of the test suite marked cuda, on this GPU),
#       all (tests, then the campaign).
# SGLang comes from the environment when it imports there; else from the offline bundle $SG/site.tgz (SG defaults
# to .sg; benchmarks/sglang_site.sh builds it), unpacked onto PYTHONPATH.  FlashInfer (sglang:flashinfer) likewise
# from the environment, else from .whl/fi-site.tgz.  OMP_NUM_THREADS defaults to 2 (several sandbox processes
# share the host).  Each step's log and wall time go to OUTDIR, result JSONs too (written after every target).
set -u
part=${1:?usage: bash benchmarks/sglang_gpu.sh smoke|campaign|tests|all OUTDIR [ARGS...]}
out=${2:-/tmp/sglang-gpu}; shift 2 || shift $#
mkdir -p "$out"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 GRAPHSAFE_DB=${GRAPHSAFE_DB:-/tmp/graphsafe-db} OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
py=${PYTHON:-python3}
SG=${SG:-.sg}
if ! $py -c "import flashinfer" 2>/dev/null && [[ -f .whl/fi-site.tgz ]]; then
  [[ -d /tmp/fi-site/flashinfer ]] || { mkdir -p /tmp/fi-site && tar -xzf .whl/fi-site.tgz -C /tmp/fi-site; }
  export PYTHONPATH=/tmp/fi-site:${PYTHONPATH:-}
fi
if ! $py -c "import sglang" 2>/dev/null; then
  [[ -f $SG/site.tgz ]] || { echo "sglang does not import and $SG/site.tgz is missing (benchmarks/sglang_site.sh)"; exit 2; }
  [[ -d /tmp/sglang-site/sglang ]] || { mkdir -p /tmp/sglang-site && tar -xzf "$SG/site.tgz" -C /tmp/sglang-site; }
  export PYTHONPATH=/tmp/sglang-site:${PYTHONPATH:-}
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
tests() {
  step tests "${TESTS_LIMIT:-240}" $py -m pytest -q -p no:randomly -p no:cacheprovider -n 0 -m cuda -rs \
    tests/integration/test_sglang.py
}
campaign() {
  step campaign "${LIMIT:-540}" $py benchmarks/sglang_campaign.py --out "$out/campaign" --report-dir "$out/reports" "$@"
}
case $part in
  smoke) step smoke "${LIMIT:-300}" $py benchmarks/sglang_campaign.py --examples 10 --seeds 0 --timeout 200 \
           --out "$out/smoke" "$@" ;;
  campaign) campaign "$@" ;;
  tests) tests ;;
  all) tests; campaign "$@" ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
