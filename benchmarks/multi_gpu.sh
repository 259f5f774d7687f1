#!/usr/bin/env bash
# Scaling over several GPUs of one host, in parts that each fit a 10-minute slot; every part writes into OUTDIR:
#   bash benchmarks/multi_gpu.sh PART [OUTDIR]
# PART: scale10  (pytest -n K --graphsafe all at 10 examples, K = 1, 2, 4 up to the GPU count)
#       scale50  (the same at 50 examples, and K = 8 on a host of 4 or more GPUs: two workers per GPU)
#       cli      (graphsafe check all --jobs K at 50 examples, K = 1 and the GPU count)
#       suite-a  (the GPU test suite, runs 1 to 3 of five in a row)
#       suite-b  (runs 4 and 5; run it right after suite-a, on the same machine)
#       shard    (--graphsafe-shard 1/2 and 2/2 collect every reference target once)
#       all      (every part in turn: for a machine without a 10-minute limit)
# Each JSON result names its machine (machine.gpu_count); copy them to benchmarks/results/ and run
# python benchmarks/tables.py.  Each step's log ends with its exit status and wall time (OUTDIR/NAME.log).
set -u
part=${1:?usage: bash benchmarks/multi_gpu.sh scale10|scale50|cli|suite-a|suite-b|shard|all [OUTDIR]}
out=${2:-/tmp/multi-gpu}
mkdir -p "$out" && out=$(cd "$out" && pwd)
export GRAPHSAFE_DB=/tmp/graphsafe-db PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
n=$(nvidia-smi -L 2>/dev/null | wc -l)
[[ $n -ge 1 ]] || { echo "no GPU visible (nvidia-smi -L lists none)"; exit 2; }
step() {  # step NAME SECONDS CMD...: run CMD with a time limit, log and wall time in OUTDIR/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s.%N) t1
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  echo "rc=$rc wall_s=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" >> "$out/$name.log"
  echo "$name: $(tail -1 "$out/$name.log")"
}
workers() {  # 1 2 4 ... up to the GPU count, then the count itself; $1=more: and twice the count (4+ GPUs)
  local k=1 list=""
  while [[ $k -lt $n ]]; do list="$list $k"; k=$((k * 2)); done
  list="$list $n"
  [[ ${1:-} == more && $n -ge 4 ]] && list="$list $((2 * n))"
  echo $list
}
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; git rev-parse HEAD; } > "$out/machine.txt" 2>&1
run_part() {
  case $1 in
    scale10)
      step "scaling-${n}gpu-10ex" 580 $py benchmarks/scaling.py --workers $(workers) --examples 10 --engine cuda \
        --name "scaling-${n}gpu-10ex" --out "$out" ;;
    scale50)
      step "scaling-${n}gpu-50ex" 580 $py benchmarks/scaling.py --workers $(workers more) --examples 50 \
        --engine cuda --startups 0 --name "scaling-${n}gpu-50ex" --out "$out" ;;
    cli)
      step "scaling-${n}gpu-50ex-cli" 580 $py benchmarks/scaling.py --cli --workers 1 "$n" --examples 50 \
        --engine cuda --startups 0 --name "scaling-${n}gpu-50ex-cli" --out "$out" ;;
    suite-a|suite-b)
      local runs="1 2 3"; [[ $1 == suite-b ]] && runs="4 5"
      for r in $runs; do
        step "gpu-suite-run$r" 190 $py -m pytest -m cuda -n $((8 * n)) -rf -p no:randomly -q tests
      done ;;
    shard)
      local empty; empty=$(mktemp -d)  # a folder without tests: only graphsafe's items are collected
      for k in 1 2; do
        (cd "$empty" && step "shard-$k-of-2" 120 $py -m pytest -p no:cacheprovider --collect-only -q \
          --graphsafe all --graphsafe-engine cuda --graphsafe-shard "$k/2")
      done
      cat "$out"/shard-*-of-2.log | grep -o '^graphsafe\[[^]]*\]' | sort | uniq -c > "$out/shard-union.txt"
      echo "shard: $(wc -l < "$out/shard-union.txt") targets, counts: $(awk '{print $1}' "$out/shard-union.txt" | sort -u | tr '\n' ' ')" ;;
    *) echo "unknown part $1"; exit 2 ;;
  esac
}
if [[ $part == all ]]; then
  for p in scale10 scale50 cli suite-a suite-b shard; do run_part $p; done
else
  run_part "$part"
fi
