"""What an address in a graph's parameters is: device memory, host memory a kernel can read (pinned or
registered), other host memory, or no address at all.

Device allocations also lie inside this process's memory map (one virtual address space for host and
device), so a word is asked of the driver first (``cuPointerGetAttribute``, the memory type: 2 device, 1 host
memory the device can reach; an error for anything else), then of ``/proc/self/maps`` (read once per
:class:`AddressSpace`: an address inside a mapping is host memory the device cannot read, such as the stack).
Answers are remembered per address.  :class:`KnownSpace` gives recorded answers instead (the fixtures).
"""

from __future__ import annotations

import bisect
import functools
from typing import Any

__all__ = ["AddressSpace", "KnownSpace", "DEVICE", "HOST_PINNED", "HOST", "plausible"]

DEVICE, HOST_PINNED, HOST = "device", "host-pinned", "host"
_LOWEST = 1 << 16  # smaller words are counts, sizes and flags
_HIGHEST = 1 << 57  # user-space addresses of x86-64 and aarch64 (5-level paging included)


def plausible(word: int) -> bool:
    """Can ``word`` be a user-space address at all (cheap: most parameter words are not)?"""
    return _LOWEST <= word < _HIGHEST


class AddressSpace:
    """This process's address space, asked lazily and remembered (one instance per graph read)."""

    def __init__(self) -> None:
        self._kinds: dict[int, str | None] = {}
        self._maps: tuple[list[int], list[tuple[int, int, bool]]] | None = None

    # -- /proc/self/maps --------------------------------------------------------------------------------
    def _mappings(self) -> tuple[list[int], list[tuple[int, int, bool]]]:
        if self._maps is None:
            starts, spans = [], []
            try:
                with open("/proc/self/maps") as f:
                    for line in f:
                        parts = line.split(None, 2)
                        a, b = parts[0].split("-")
                        starts.append(int(a, 16))
                        spans.append((int(a, 16), int(b, 16), parts[1].startswith("r")))
            except OSError:  # not Linux: nothing is known readable
                pass
            self._maps = starts, spans
        return self._maps

    def _mapping(self, addr: int) -> tuple[int, int, bool] | None:
        starts, spans = self._mappings()
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and spans[i][0] <= addr < spans[i][1]:
            return spans[i]
        return None

    def readable(self, addr: int, nbytes: int) -> bool:
        """Can this process read ``nbytes`` at host address ``addr`` without faulting?"""
        end, at = addr + max(nbytes, 1), addr
        while at < end:
            m = self._mapping(at)
            if m is None or not m[2]:
                return False
            at = m[1]
        return True

    # -- kinds ----------------------------------------------------------------------------------------
    def kind(self, word: int) -> str | None:
        """``device``, ``host-pinned`` (host memory the device reads), ``host`` (other mapped host memory), or
        None (not an address)."""
        if not plausible(word):
            return None
        if word not in self._kinds:
            self._kinds[word] = self._ask(word)
        return self._kinds[word]

    def _ask(self, word: int) -> str | None:
        memory_type = _memory_type(word)
        if memory_type == 2:
            return DEVICE
        if memory_type in (1, 4):  # host memory the device can reach (pinned, registered), or managed
            return HOST_PINNED
        return HOST if self._mapping(word) is not None else None


def _memory_type(word: int) -> int | None:
    cu = _driver()
    if cu is None:
        return None
    try:
        res = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, word)
    except Exception:  # noqa: BLE001 - not a pointer the driver knows
        return None
    return int(res[1]) if int(res[0]) == 0 else None


@functools.lru_cache(maxsize=1)
def _driver() -> Any:
    try:
        from cuda.bindings import driver  # optional (graphsafe[graph]); the reader checks it is there

        return driver
    except Exception:  # noqa: BLE001
        return None


class KnownSpace:
    """An address space whose answers were recorded (``{word: kind}``, the committed fixtures): for tests
    of everything past the driver on machines without a GPU."""

    def __init__(self, kinds: dict[int, str | None]):
        self._kinds = dict(kinds)

    def kind(self, word: int) -> str | None:
        return self._kinds.get(word) if plausible(word) else None

    def readable(self, addr: int, nbytes: int) -> bool:  # pragma: no cover - recorded reads need no memory
        return False
