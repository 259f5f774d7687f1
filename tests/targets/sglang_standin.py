"""graphsafe's SGLang targets on the CPU stand-in (``graphsafe.sglang.standin``): every registered SGLang target,
with ``library = "standin"`` and small heads (the stand-in attends in plain torch on the CPU).

``STANDIN``: registered name -> the stand-in class; ``EXPECTED``: name -> the finding kinds it must get.
"""

from __future__ import annotations

from graphsafe import sglang
from graphsafe.sglang.standin import backends as standin_backends


def small(base: type, module: str = __name__, **extra) -> type:
    """``base`` (an SGLang target class) on the stand-in; ``extra`` class attributes on top."""
    attrs = {"library": "standin", "preload": (), "num_heads": 4, "num_kv_heads": 2, "head_dim": 16}
    attrs |= {"name": base.name + " (stand-in)", "__module__": module, **extra}
    return type(base.__name__, (base,), attrs)


STANDIN: dict[str, type] = {name: small(sglang.resolve(name)) for name in sglang.names()}
for _cls in STANDIN.values():  # importable by name: reports' repro scripts and sandbox children find them
    globals()[_cls.__name__] = _cls

EXPECTED: dict[str, frozenset[str]] = {
    name: frozenset({cls.expected} if cls.expected else ()) for name, cls in STANDIN.items()
}


class UserBackend(standin_backends.TritonAttnBackend):
    """A backend of one's own (here: the stand-in's Triton backend, renamed)."""
