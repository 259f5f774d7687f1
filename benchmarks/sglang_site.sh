#!/usr/bin/env bash
# An offline SGLang bundle for a GPU machine without a package index, on an image that has torch, triton and
# (for sglang:flashinfer) FlashInfer already:
#   bash benchmarks/sglang_site.sh            # writes .sg/site.tgz (about 15 MB; git-ignored: add /.sg/ to
#                                             # .git/info/exclude), for Python 3.12 on x86-64 Linux
# On the GPU machine: tar -xzf .sg/site.tgz -C /tmp/sglang-site and put /tmp/sglang-site on PYTHONPATH
# (benchmarks/sglang_gpu.sh does both).
#
# What goes in, and why:
#   sglang/      the SGLang wheel's Python tree without its compiled parts (*.so) and without what attention
#                backends never import (the diffusion package, tests, benchmarks, model definitions, tuning
#                configs); sglang/utils.py imports IPython for notebook display only: that import may fail.
#   sgl_kernel/  the sglang-kernel wheel's Python files only: module-level imports of its names succeed, and
#                loading its compiled library is skipped; a compiled op called would fail (the decode paths of the
#                Triton and FlashInfer backends call none).
#   deps         pure-Python (or small compiled) packages SGLang's import chain needs that a torch image lacks.
# Versions: SGLANG (0.5.23), SGLANG_KERNEL (0.4.10); DEPS pins what the bundle was tested with.
set -euo pipefail
SGLANG=${SGLANG:-0.5.23}
SGLANG_KERNEL=${SGLANG_KERNEL:-0.4.10}
OUT=${OUT:-$PWD/.sg/site.tgz}
CACHE=${CACHE:-/tmp/sglang-wheels}
DEPS=${DEPS:-"orjson==3.13.0 pybase64==1.5.1 msgspec==0.22.0 pyzmq==27.3.0 pydantic==2.14.4 pydantic-core==2.50.5
  annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 starlette==1.10.0 dill==0.4.1
  compressed-tensors==0.18.0 loguru==0.7.3 gguf==0.19.0 openai==2.8.0 distro==1.9.0 sniffio==1.3.1
  partial-json-parser==0.2.1.1.post7"}
target=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
for p in manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  target+=(--platform "${p}_x86_64")
done
target+=(--platform any)
mkdir -p "$CACHE" "$(dirname "$OUT")"
wheel() {  # wheel NAME VERSION: the cached wheel's path, downloaded first when missing
  local f; f=$(ls "$CACHE"/"${1//-/_}"-"$2"-*.whl 2>/dev/null | head -1 || true)
  if [[ -z $f ]]; then
    pip download -q --no-deps "${target[@]}" -d "$CACHE" "$1==$2" >&2
    f=$(ls "$CACHE"/"${1//-/_}"-"$2"-*.whl | head -1)
  fi
  echo "$f"
}
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
python3 - "$(wheel sglang "$SGLANG")" "$(wheel sglang-kernel "$SGLANG_KERNEL")" "$site" <<'PY'
import sys, zipfile
from pathlib import Path

sglang_whl, kernel_whl, site = sys.argv[1], sys.argv[2], Path(sys.argv[3])
skip = ("sglang/multimodal_gen/", "sglang/test/", "sglang/benchmark/", "sglang/srt/models/")
with zipfile.ZipFile(sglang_whl) as z:
    for n in z.namelist():
        tuning = n.endswith(".json") and any(d in n for d in ("/moe_runner/triton_utils/configs/", "/gemm/configs/"))
        if n.endswith(".so") or n.startswith(skip) or tuning or ("/lora/" in n and "configs/" in n):
            continue
        z.extract(n, site)
with zipfile.ZipFile(kernel_whl) as z:
    for n in z.namelist():
        if (n.startswith("sgl_kernel/") and n.endswith(".py") and "/testing/" not in n) or ".dist-info/" in n:
            z.extract(n, site)


def patch(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if old not in text:
        sys.exit(f"{path}: the line to patch is gone ({old.strip()!r}); update benchmarks/sglang_site.sh")
    path.write_text(text.replace(old, new))


patch(site / "sglang/utils.py", "from IPython.display import HTML, display\n",
      "try:  # (offline bundle: IPython is for notebooks only)\n    from IPython.display import HTML, display\n"
      "except ImportError:\n    HTML = display = None\n")
init = site / "sgl_kernel/__init__.py"
patch(init, "    common_ops = _load_architecture_specific_ops()\n",
      "    common_ops = None  # (offline bundle: no compiled library)\n")
patch(init, "    if torch.version.cuda is not None:\n        _preload_cuda_library()\n",
      "    pass  # (offline bundle: no CUDA library to preload)\n")
PY
# shellcheck disable=SC2086
pip install -q --no-deps --no-compile --target "$site" "${target[@]}" $DEPS
rm -rf "$site/bin"
tar -czf "$OUT" -C "$site" .
echo "wrote $OUT ($(du -h "$OUT" | cut -f1)): sglang $SGLANG without compiled parts, sgl_kernel $SGLANG_KERNEL (Python only)"
