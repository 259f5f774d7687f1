#!/usr/bin/env bash
# The standalone vLLM TRITON_ATTN repros on one GPU, every case of each on vLLM 0.26.0 and 0.33.0:
#   bash benchmarks/vllm_repros.sh OUTDIR        # from the repository root, .vl/ beside it (see vllm_gpu.sh)
# Each case is its own process with its own time limit (a device fault ends only its CUDA context); the cases
# run side by side (about 20 s of vLLM import each).  vLLM comes from $VL/site026.tgz and $VL/site033.tgz
# (VL defaults to .vl), unpacked once into /tmp/vllm-site026 and /tmp/vllm-site033, with a copy of
# $VL/cache026 or $VL/cache033 as VLLM_CACHE_ROOT per process.  OUTDIR gets four files: gpu.txt,
# repros026.log and repros033.log (every case's output, one after another) and summary.txt (each case's
# SUMMARY line, exit status and wall time).  LIMIT (seconds per case, default 170) bounds the whole run.
set -u
out=${1:?usage: bash benchmarks/vllm_repros.sh OUTDIR}
mkdir -p "$out"
py=${PYTHON:-python3}
VL=${VL:-.vl}
LIMIT=${LIMIT:-170}
root=$(pwd)
work=$(mktemp -d /tmp/vllm-repros.XXXXXX)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1

for tag in 026 033; do
  site=/tmp/vllm-site$tag
  if [[ ! -d $site/vllm ]]; then
    [[ -f $VL/site$tag.tgz ]] || { echo "$VL/site$tag.tgz is missing" | tee -a "$out/summary.txt"; exit 2; }
    mkdir -p "$site" && tar -xzf "$VL/site$tag.tgz" -C "$site"
  fi
done

one() {  # one TAG SCRIPT CASE: run one case in its own process, log and wall time in $work
  local tag=$1 script=$2 case=$3
  local log=$work/$tag-$script-$case.log cache=$work/cache-$tag-$script-$case
  cp -r "$VL/cache$tag" "$cache"
  local t0 t1 rc
  t0=$(date +%s.%N)
  PYTHONPATH=/tmp/vllm-site$tag VLLM_CACHE_ROOT=$cache timeout "$LIMIT" \
    "$py" "$root/reports/vllm/$script/repro.py" "$case" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "rc=$rc wall_s=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")" >> "$log"
}

t_start=$(date +%s)
for tag in 026 033; do
  for c in decode mixed sweep control fault; do one $tag triton_attn_split_kv_scratch_rows $c & done
  for c in graphsafe runner; do one $tag triton_attn_padded_kernel_choice $c & done
done
wait

for tag in 026 033; do
  : > "$out/repros$tag.log"
  for log in "$work"/$tag-*.log; do
    name=$(basename "$log" .log)
    { echo "===== $name"; cat "$log"; echo; } >> "$out/repros$tag.log"
    echo "$name: $(grep '^SUMMARY' "$log" | tail -1 || true) [$(tail -1 "$log")]" >> "$out/summary.txt"
    if ! grep -q '^SUMMARY' "$log"; then
      echo "  (no SUMMARY line; last lines: $(grep -v -e ' INFO ' -e ' WARNING ' "$log" | tail -3 | tr '\n' ' '))" \
        >> "$out/summary.txt"
    fi
  done
done
echo "total wall_s=$(($(date +%s) - t_start))" >> "$out/summary.txt"
cat "$out/summary.txt"
rm -rf "$work"
