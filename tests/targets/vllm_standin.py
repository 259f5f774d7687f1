"""graphsafe's vLLM targets on the CPU stand-in (``graphsafe.vllm.standin``): every registered vLLM target, with
``library = "standin"``.

``STANDIN``: registered name -> the stand-in class; ``EXPECTED``: name -> the finding kinds it must get.
"""

from __future__ import annotations

from graphsafe import vllm
from graphsafe.vllm.standin import attention as standin_attention


def small(base: type, module: str = __name__, **extra) -> type:
    """``base`` (a vLLM target class) on the stand-in; ``extra`` class attributes on top.  ``module``: where the
    class is importable from by its name."""
    return type(
        base.__name__,
        (base,),
        {"library": "standin", "preload": (), "name": base.name + " (stand-in)", "__module__": module, **extra},
    )


STANDIN: dict[str, type] = {name: small(vllm.resolve(name)) for name in vllm.names()}
for _cls in STANDIN.values():  # importable by name: reports' repro scripts and sandbox children find them
    globals()[_cls.__name__] = _cls

EXPECTED: dict[str, frozenset[str]] = {
    name: frozenset({cls.expected} if cls.expected else ()) for name, cls in STANDIN.items()
}


class Preloading(STANDIN["vllm:TRITON_ATTN"]):
    """The stand-in's TRITON_ATTN naming a module for the fork server to import (as vLLM's targets name vLLM)."""

    preload = ("graphsafe.vllm.standin.mla",)


class UserBackend(standin_attention.StandinAttentionBackend):
    """A backend of one's own (here: the stand-in's, renamed)."""

    @staticmethod
    def get_name() -> str:
        return "USER_BACKEND"
