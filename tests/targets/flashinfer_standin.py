"""graphsafe's FlashInfer targets on the CPU stand-in (``graphsafe.flashinfer.standin``), small enough for the
emulator: every registered FlashInfer target, with ``library = "standin"``, small heads and a short spec.

``STANDIN``: registered name -> the stand-in class; ``EXPECTED``: name -> the finding kinds it must get.
"""

from __future__ import annotations

from graphsafe import CaptureSpec
from graphsafe import flashinfer as fi

SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=64, block_size=16)
MIXED = CaptureSpec(max_reqs=4, max_query_len=8, max_seq_len=64, block_size=16)


def small(base: type, module: str = __name__, **extra) -> type:
    """``base`` (a FlashInfer target class) on the stand-in, small enough for the emulator; ``extra`` class
    attributes on top.  ``module``: where the class is importable from by its name."""
    spec = MIXED if base.default_spec.max_query_len > 1 else SPEC
    dims = {"head_dim": 32, "head_dim_kpe": 16} if issubclass(base, fi.MLA) else {"head_dim": 16}
    return type(
        base.__name__,
        (base,),
        {
            "library": "standin",
            "default_spec": spec,
            "workspace_mib": 1,
            "name": base.name + " (stand-in)",
            "__module__": module,
            **dims,
            **extra,
        },
    )


STANDIN: dict[str, type] = {name: small(fi.resolve(name)) for name in fi.names()}
for _cls in STANDIN.values():  # importable by name: reports' repro scripts and sandbox children find them
    globals()[_cls.__name__] = _cls

EXPECTED: dict[str, frozenset[str]] = {
    name: frozenset({cls.expected} if cls.expected else ()) for name, cls in STANDIN.items()
}
