#!/usr/bin/env bash
# The GPU measurements behind benchmarks/results (the documentation's Benchmarks page), in parts that each
# fit a 10-minute slot:
#   bash benchmarks/gpu_release.sh PART OUTDIR
# PART: tests (the test suite on this machine, the reference suite on cuda, guard overhead), bench (throughput, state size),
#       audit (graphsafe audit all, detection), scale1 (scaling on this host's GPUs: -n 1 and -n 2),
#       scale (scaling -n 1 and -n <GPU count>), timeline (where a -n 1 run's wall time goes, 2 runs),
#       rate (the 20-seed detection rate of the capture-dependent hazards),
#       flashinfer (the FlashInfer campaign, safe targets then buggy variants, 200 examples, 3 seeds; repro
#       scripts under reports/flashinfer), fi-examples (the standalone scripts in examples/flashinfer).
#       FlashInfer comes from the environment, else from its wheels in .whl/ (pip install --no-index --no-deps),
#       else from .whl/fi-site.tgz, a tarball of the wheels unpacked into one site-packages tree (for a carry
#       limit below the wheels' size); docs/how-to/flashinfer.md, "A GPU machine without network".
# Each step's log and its wall time go to OUTDIR; result JSONs too (copy them to benchmarks/results/).
set -u
part=${1:?usage: bash benchmarks/gpu_release.sh tests|bench|audit|scale1|scale|timeline [OUTDIR]}; out=${2:-/tmp/gpu-release}
mkdir -p "$out"
export GRAPHSAFE_DB=/tmp/graphsafe-db PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
step() {  # step NAME SECONDS CMD...: run CMD with a time limit, log and wall time in OUTDIR/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s.%N) t1
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  echo "rc=$rc wall_s=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" >> "$out/$name.log"
  tail -1 "$out/$name.log"
}
if [[ $part == flashinfer || $part == fi-examples ]] && ! $py -c "import flashinfer" 2>/dev/null; then
  if compgen -G ".whl/flashinfer_python-*.whl" >/dev/null; then
    $py -m pip install -q --no-index --no-deps --find-links .whl flashinfer-python apache-tvm-ffi || exit 2
  elif [[ -f .whl/fi-site.tgz ]]; then
    mkdir -p /tmp/fi-site && tar -xzf .whl/fi-site.tgz -C /tmp/fi-site && export PYTHONPATH=/tmp/fi-site:${PYTHONPATH:-}
  else
    echo "FlashInfer is not importable, and neither its wheels (.whl/*.whl) nor .whl/fi-site.tgz are here"; exit 2
  fi
  [[ -f .whl/jit.tgz ]] && tar -xzf .whl/jit.tgz -C "$HOME"  # a JIT cache from an earlier run, if one was kept
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
case $part in
  tests)
    step tests_gpu 330 $py -m pytest -q -p no:randomly -p no:cacheprovider -n 8 tests
    step check_cuda 200 $py -m graphsafe check all --engine cuda --report-dir "$out/reports" --seed 0 --expected
    step guard 200 $py benchmarks/guard_overhead.py --engine cuda --replays 10000 --steps 10000 --every 100 \
      --rounds 10 --out "$out" ;;
  bench)
    step throughput 280 $py benchmarks/throughput.py --engine cuda --out "$out"
    step state_size 280 $py benchmarks/state_size.py --gpu --engine cuda --out "$out" ;;
  audit)
    step audit 330 $py -m graphsafe audit all --engine cuda --seed 0 --report-dir "$out/audit"
    step detection 240 $py benchmarks/detection.py --engine cuda --seeds 2 --rate-seeds 5 --fixed-examples 50 \
      --out "$out" ;;
  scale1)
    step scaling1 560 $py benchmarks/scaling.py --workers 1 2 --engine cuda --name scaling-1gpu \
      --out "$out" ;;
  scale)
    n=$(nvidia-smi -L | wc -l)
    step scaling 560 $py benchmarks/scaling.py --workers 1 "$n" --engine cuda --name "scaling-${n}gpu" \
      --out "$out" ;;
  timeline)
    step timeline 500 $py benchmarks/suite_timeline.py --workers 1 --examples 10 --runs 2 --engine cuda --out "$out" ;;
  rate)
    step rate 560 $py benchmarks/detection.py --engine cuda --suite hazards --rate-seeds 20 --only \
      varlen:BatchMaxSeqlenLoop varlen:DecodePrefillHostCounts varlen:DecodeKernelChoice workspace:GrowingWorkspace \
      --out "$out" ;;
  flashinfer)
    step fi_safe 560 $py benchmarks/flashinfer_campaign.py --only safe --out "$out/safe"
    step fi_buggy 560 $py benchmarks/flashinfer_campaign.py --only buggy --report-dir reports/flashinfer \
      --out "$out/buggy" ;;
  fi-examples)
    for f in examples/flashinfer/*.py; do step "example_$(basename "$f" .py)" 120 $py "$f"; done ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
