"""A family of targets: the targets one package registers for one library (FlashInfer, vLLM, SGLang, the
reference kernels), described once so that the checker and the command line treat every family alike.

A :class:`Family` holds a package's registry (``name -> "module:Class"``, imported on first use), which of
its targets are safe and which are deliberate mistakes (each with its safe twin), the library its targets
drive (how it is loaded, its version, what a target needs where it cannot run), the modules the fork server
imports once for every sandbox child, and the capture policy of the library's own engine.  The checker's
table of families (:mod:`graphsafe.checker.families`) lists the packages; a new engine is one package with
a ``FAMILY`` and one row there.

Example::

    FAMILY = Family(
        prefix="myengine",
        package="my_pkg.myengine",
        targets={"myengine:triton": "targets:Triton", "myengine:triton:fresh_lens": "variants:FreshLens"},
        safe=("myengine:triton",),
        library="myengine",
        install_hint="myengine targets need myengine and an NVIDIA GPU",
    )
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .errors import ContractError, UsageError

__all__ = ["Family", "with_mixins"]


@dataclass(frozen=True)
class Family:
    """One package's targets and the library they drive (see the module docstring).

    * ``prefix``: the word target names start with (``"vllm"``) and the group that stands for them;
      ``prefixes``: every prefix of a target made by reference (``vllm-mla`` too), with ``by_reference``
      (``"module:function"``, ``name -> class or None``) making such a target from its name;
    * ``package``: the package; ``targets``: ``name -> "module:Class"`` (the module relative to ``package``);
    * ``safe``: the targets that must get no finding; every other one is a deliberate mistake, whose safe
      twin is ``twin_of[name]`` (default: the name without its last ``:part``);
    * ``library``: the module the targets drive (None: none, the targets run anywhere); ``interface``: the
      module of ``package`` that adapts it (imported after the library; None: the library itself);
      ``imports``: the module whose import loads the library (default: ``library``);
      ``environment``: set (where unset) before the library is imported; ``install_hint``: what a target
      needs, said wherever one cannot run; ``needs_gpu``: whether a target needs an NVIDIA GPU too;
    * ``preload``: modules the fork server imports once for every sandbox child;
    * ``in_all``: whether the group ``all`` includes the family (the reference kernels: they run anywhere);
    * ``capture``: the capture policy the library's own engine captures with (None: the check's default);
    * ``also``: one line for ``graphsafe list`` on the names the family takes besides its registry.
    """

    prefix: str
    package: str
    targets: Mapping[str, str]
    safe: tuple[str, ...]
    library: str | None = None
    install_hint: str = ""
    interface: str | None = None
    imports: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    needs_gpu: bool = True
    twin_of_: Mapping[str, str] = field(default_factory=dict)
    prefixes: tuple[str, ...] = ()
    by_reference: str | None = None
    preload: tuple[str, ...] = ()
    in_all: bool = False
    capture: str | None = None
    also: str = ""

    # -- the registry ---------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every registered name, safe targets first."""
        return list(self.safe) + self.buggy

    @property
    def buggy(self) -> list[str]:
        """The deliberate mistakes, in registry order."""
        return [n for n in self.targets if n not in self.safe]

    @property
    def twin_of(self) -> dict[str, str]:
        """Each deliberate mistake's safe twin."""
        return {n: self.twin_of_.get(n) or n.rpartition(":")[0] for n in self.buggy}

    def owns(self, name: str) -> bool:
        """Does ``name`` name one of this family's targets (registered, or ``<prefix>:<ref>`` by reference)?"""
        if name in self.targets:
            return True
        prefix, sep, ref = name.partition(":")
        return bool(self.by_reference and sep and ref and prefix in (self.prefixes or (self.prefix,)))

    def resolve(self, name: str) -> type:
        """The class for a registered name, or for ``<prefix>:<ref>`` where the family makes targets by
        reference; a :class:`UsageError` naming the registered ones otherwise."""
        entry = self.targets.get(name)
        if entry is not None:
            module, _, attr = entry.partition(":")
            return getattr(importlib.import_module(f"{self.package}.{module}"), attr)
        if self.by_reference and self.owns(name):
            cls = _function(self.package, self.by_reference)(name)
            if cls is not None:
                return cls
        also = f", or {self.prefix}:<backend>" if self.by_reference else ""
        raise UsageError(f"unknown {self.prefix} target {name!r}; known: {', '.join(self.names())}{also}")

    # -- the library ----------------------------------------------------------------------
    def load(self, library: Any) -> Any:
        """The interface for a target's ``library``: the family's library (imported now), ``"standin"``
        (the package's CPU stand-in, ``<package>.standin``) or a module with the same interface."""
        if library == self.library and library is not None:
            return self._import_real()
        if library == "standin":
            return importlib.import_module(f"{self.package}.standin")
        if isinstance(library, str):
            raise ContractError(f"library must be {self.library!r}, 'standin' or a module, got {library!r}")
        return library

    def _import_real(self) -> ModuleType:
        assert self.library is not None
        for k, v in self.environment.items():
            os.environ.setdefault(k, v)
        try:
            lib = importlib.import_module(self.imports or self.library)
        except Exception as e:  # noqa: BLE001 - any failure to import is "the library is missing or broken here"
            raise ContractError(
                f"{self.library} does not import ({type(e).__name__}: {e}); {self.install_hint}"
            ) from None
        if self.interface is None:
            return lib
        return importlib.import_module(f"{self.package}.{self.interface}")

    def requirement(self, library: Any = None) -> str | None:
        """None when the family's targets (on ``library``, default the family's own) can run here, else one
        line saying what is missing (the library's presence is looked up, not imported: that takes seconds)."""
        library = self.library if library is None else library
        if self.library is None or library != self.library:
            return None
        top = self.library.partition(".")[0]
        if importlib.util.find_spec(top) is None:
            return f"{top} is not installed; {self.install_hint}"
        if self.needs_gpu:
            import torch  # graphsafe's own dependency: imported only when the library is there to use it

            if not torch.cuda.is_available():
                return f"no NVIDIA GPU is visible; {self.install_hint}"
        return None

    @staticmethod
    def version(lib: Any) -> str:
        """The library's version string (a stand-in says it is one)."""
        return str(getattr(lib, "__version__", "unknown"))

    def import_ahead(self, modules: tuple[str, ...] = ()) -> None:
        """Import the library, then ``modules`` (the library's modules of the registered backends): what a
        fork-server preload module (``preload``) does, once for every sandbox child.  Nothing fails here: a
        library or module that does not import is left for its check to report."""
        if self.library is None:
            return
        try:
            self._import_real()
        except Exception:  # noqa: BLE001 - the library missing or broken: each check says so itself
            return
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001,S112 - a backend missing from this release: its check reports it
                continue


@functools.lru_cache(maxsize=128)
def with_mixins(mixins: tuple[type, ...], base: type) -> type[Any]:
    """``base`` with ``mixins`` put in front of it (graphsafe's deliberate mistakes in an engine's own classes):
    one class per combination, so that its identity is stable."""
    if not mixins:
        return base
    return type(f"{mixins[0].__name__}{base.__name__}", (*mixins, base), {"__module__": mixins[0].__module__})


def _function(package: str, ref: str) -> Callable[[str], Any]:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(f"{package}.{module}"), attr)
