"""Targets whose kernels only the graph reader sees: a C++/CUDA extension built with
``torch.utils.cpp_extension.load_inline`` (nvcc), called without ``opaque_call``, so that neither the aten
dispatcher nor Triton's launcher records them; and cuBLAS called from that extension.  CUDA only.

Each unsafe variant makes one mistake the graph itself shows: a buffer ``prepare()`` rebinds (the old one
freed, the graph's kernel still points at it), a host scalar the capture froze into a kernel's parameters,
an accumulator nothing resets per step.  The extension is built once per machine (about a minute; later
processes load it from ``TORCH_EXTENSIONS_DIR``).
"""

from __future__ import annotations

import functools

import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support

SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=32, block_size=8)
D = 64
MAGIC = 0x5AFE

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

__global__ void gs_gather_rows(const float* __restrict__ src, const int* __restrict__ idx, float* out, int n, int d) {
  int r = blockIdx.x, c = threadIdx.x;
  if (r < n && c < d) out[r * d + c] = src[idx[r] * d + c];
}
__global__ void gs_scale_rows(const float* __restrict__ x, float* out, int n, int d, float s) {
  int r = blockIdx.x, c = threadIdx.x;
  if (r < n && c < d) out[r * d + c] = x[r * d + c] * s;
}
__global__ void gs_spin_until(const int* flag, const float* x, float* out, int n, int d, long long budget) {
  // waits for flag[0] == MAGIC: a replay that reads a freed (zeroed) flag spins for `budget` rounds
  while (*(volatile const int*)flag != 0x5AFE && budget-- > 0) { __nanosleep(1000); }
  int r = blockIdx.x, c = threadIdx.x;
  if (r < n && c < d) out[r * d + c] = x[r * d + c] + 1.0f;
}
__global__ void gs_accumulate(const float* __restrict__ x, float* acc, float* out, int n, int d) {
  int r = blockIdx.x, c = threadIdx.x;
  if (r < n && c < d) { float v = acc[r * d + c] + x[r * d + c]; acc[r * d + c] = v; out[r * d + c] = v; }
}

static cudaStream_t cur() { return at::cuda::getCurrentCUDAStream(); }

void gather_rows(torch::Tensor src, torch::Tensor idx, torch::Tensor out) {
  int n = out.size(0), d = out.size(1);
  gs_gather_rows<<<n, d, 0, cur()>>>(src.data_ptr<float>(), idx.data_ptr<int>(), out.data_ptr<float>(), n, d);
}
void scale_rows(torch::Tensor x, torch::Tensor out, double s) {
  int n = out.size(0), d = out.size(1);
  gs_scale_rows<<<n, d, 0, cur()>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, d, (float)s);
}
void spin_until(torch::Tensor flag, torch::Tensor x, torch::Tensor out, int64_t budget) {
  int n = out.size(0), d = out.size(1);
  gs_spin_until<<<n, d, 0, cur()>>>(flag.data_ptr<int>(), x.data_ptr<float>(), out.data_ptr<float>(), n, d, budget);
}
void accumulate(torch::Tensor x, torch::Tensor acc, torch::Tensor out) {
  int n = out.size(0), d = out.size(1);
  gs_accumulate<<<n, d, 0, cur()>>>(x.data_ptr<float>(), acc.data_ptr<float>(), out.data_ptr<float>(), n, d);
}
void host_copy(torch::Tensor src, torch::Tensor dst) {
  // dst (device) <- src (pinned host), queued on the current stream: a memcpy node when captured
  TORCH_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyHostToDevice, cur()) == cudaSuccess);
}
void half_matmul(torch::Tensor a, torch::Tensor b, torch::Tensor out) {
  // out[m, n] = a[m, k] @ b[k, n], fp16, through cuBLAS directly (row-major: computed as out^T = b^T a^T)
  int m = a.size(0), k = a.size(1), n = b.size(1);
  cublasHandle_t h = at::cuda::getCurrentCUDABlasHandle();
  float one = 1.0f, zero = 0.0f;
  TORCH_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b.data_ptr(), CUDA_R_16F, n, a.data_ptr(),
                           CUDA_R_16F, k, &zero, out.data_ptr(), CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS, "cublasGemmEx failed");
}
"""
_CPP = """
void gather_rows(torch::Tensor src, torch::Tensor idx, torch::Tensor out);
void scale_rows(torch::Tensor x, torch::Tensor out, double s);
void spin_until(torch::Tensor flag, torch::Tensor x, torch::Tensor out, int64_t budget);
void accumulate(torch::Tensor x, torch::Tensor acc, torch::Tensor out);
void half_matmul(torch::Tensor a, torch::Tensor b, torch::Tensor out);
void host_copy(torch::Tensor src, torch::Tensor dst);
"""


@functools.lru_cache(maxsize=1)
def ext():
    """The extension module, built on first use (nvcc; cached in ``TORCH_EXTENSIONS_DIR``)."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(
        "graphsafe_test_graph_ext",
        cpp_sources=_CPP,
        cuda_sources=_CUDA,
        functions=["gather_rows", "scale_rows", "spin_until", "accumulate", "half_matmul", "host_copy"],
        extra_ldflags=["-lcublas"],
        extra_cuda_cflags=["-O2"],
        verbose=False,
    )


class _Rows(graphsafe.Target):
    """One row per request: ``self.x`` holds the batch's rows, ``self.out`` the result."""

    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = SPEC
    expected = None

    def setup(self, spec: CaptureSpec, device) -> None:
        self.ext = ext()
        n = spec.max_reqs
        self.x = torch.zeros(n, D, device=device)
        self.out = torch.zeros(n, D, device=device)
        self.table = torch.randn(spec.num_blocks, D, device=device)  # rows gathered by index

    def write_rows(self, batch: Batch) -> None:
        n = batch.num_reqs
        self.x[:n].copy_(graphsafe.seeded((n, D), seed=batch.seed, device=self.x.device))
        self.x[n:] = 0


class ExtGatherSafe(_Rows):
    """Safe: an extension kernel gathers rows of a table through an index buffer written in place."""

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.idx = torch.zeros(spec.max_reqs, dtype=torch.int32, device=device)

    def prepare(self, batch: Batch) -> None:
        self.write_rows(batch)
        rows = [table[0] for table in batch.block_table] + [0] * (self.idx.numel() - batch.num_reqs)
        self.idx.copy_(torch.tensor(rows, dtype=torch.int32))

    def forward(self) -> torch.Tensor:
        self.ext.gather_rows(self.table, self.idx, self.out)
        return self.out


class ExtGatherRebound(ExtGatherSafe):
    """prepare() builds a new index buffer every step: the graph's kernel reads the one it captured, freed."""

    expected = "stale-pointer"

    def prepare(self, batch: Batch) -> None:
        self.write_rows(batch)
        rows = [table[0] for table in batch.block_table] + [0] * (self.idx.numel() - batch.num_reqs)
        self.idx = torch.tensor(rows, dtype=torch.int32, device=self.x.device)  # BUG: a new tensor per step


class ExtScaleSafe(_Rows):
    """Safe: an extension kernel scales the rows by a host scalar that never changes."""

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.scale = 0.5

    def prepare(self, batch: Batch) -> None:
        self.write_rows(batch)

    def forward(self) -> torch.Tensor:
        self.ext.scale_rows(self.x, self.out, self.scale)
        return self.out


class ExtScaleFrozen(ExtScaleSafe):
    """The host scalar comes from the batch (its longest sequence): the capture froze the capture batch's."""

    expected = "frozen-host-value"

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.scale = 1.0 / batch.max_seq_len  # BUG: a per-batch host value passed by value into the kernel


class ExtSpinRebound(_Rows):
    """A kernel that waits on a flag: prepare() rebinds the flag (zeroing the old one), so a replay reading the
    captured flag would spin; graphsafe must name it before any such replay runs."""

    expected = "stale-pointer"
    budget = 1 << 22  # rounds of ~1 us: a stale replay would take seconds, not forever

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.flag = torch.full((1,), MAGIC, dtype=torch.int32, device=device)

    def prepare(self, batch: Batch) -> None:
        self.write_rows(batch)
        old, self.flag = self.flag, torch.full((1,), MAGIC, dtype=torch.int32, device=self.x.device)  # BUG
        old.zero_()

    def forward(self) -> torch.Tensor:
        self.ext.spin_until(self.flag, self.x, self.out, self.budget)
        return self.out


class ExtAccumulator(_Rows):
    """An accumulator the extension kernel reads and writes, which nothing resets per step: each replay starts
    from what the last one left (neither static nor an output)."""

    expected = "unpersisted-metadata"

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.acc = torch.zeros(spec.max_reqs, D, device=device)

    def prepare(self, batch: Batch) -> None:
        self.write_rows(batch)

    def forward(self) -> torch.Tensor:
        self.ext.accumulate(self.x, self.acc, self.out)
        return self.out


class CublasSafe(_Rows):
    """Safe: cuBLAS (fp16, through the extension) multiplies the rows by a weight held in place."""

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.a = torch.zeros(spec.max_reqs, D, dtype=torch.float16, device=device)
        self.w = (torch.randn(D, D, device=device) / D**0.5).half()
        self.out = torch.zeros(spec.max_reqs, D, dtype=torch.float16, device=device)

    def prepare(self, batch: Batch) -> None:
        self.write_rows(batch)
        self.a.copy_(self.x)

    def forward(self) -> torch.Tensor:
        self.ext.half_matmul(self.a, self.w, self.out)
        return self.out


class CublasRebound(CublasSafe):
    """prepare() makes a new operand tensor every step: cuBLAS's kernel in the graph reads the captured one."""

    expected = "stale-pointer"

    def prepare(self, batch: Batch) -> None:
        self.write_rows(batch)
        self.a = self.x.half()  # BUG: a new tensor per step


class HostTemporary(_Rows):
    """forward() copies the batch's lengths (through the extension: no aten op records it) from a pinned host
    tensor it makes on the spot: the graph copies from that temporary forever (the capture batch's lengths, until
    the pinned block is reused)."""

    expected = "stale-pointer"

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.lens = torch.zeros(spec.max_reqs, dtype=torch.float32, device=device)
        self.host_lens = [0.0] * spec.max_reqs

    def prepare(self, batch: Batch) -> None:
        self.write_rows(batch)
        self.host_lens = [float(s) for s in batch.seq_lens] + [0.0] * (self.lens.numel() - batch.num_reqs)

    def forward(self) -> torch.Tensor:
        staged = torch.tensor(self.host_lens).pin_memory()  # BUG: a temporary the graph reads at every replay
        self.ext.host_copy(staged, self.lens)
        torch.mul(self.x, self.lens[:, None], out=self.out)
        return self.out
