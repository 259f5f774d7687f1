"""All-or-nothing report directories.

A report is written into a temporary sibling directory
(``.graphsafe-tmp~<name>~<pid>~<random>``) and renamed into place only once
every file is written and flushed.  An exception or a kill part-way leaves no
directory under the report's own name: at most a leftover temporary directory,
which the next write in the same parent removes once its writer process is gone
(or after :data:`STALE_AFTER_S`).

Rewriting an existing report: the old directory is renamed aside
(``.graphsafe-old~<name>~...``), the new one renamed into place, then the old
one deleted.  A kill between those two renames leaves the old report aside;
the next write's clean-up renames it back if nothing took its place.

Keeping an existing report: ``staged_directory(final, keep=...)`` discards the
fully written temporary directory instead of committing it when ``keep(tmp)``
finds that the report already in place says the same (nothing under ``final`` is touched).

Removing a report (:func:`remove`): the directory is renamed to a temporary
name first, then deleted; a kill part-way leaves a temporary directory that the
next clean-up removes, never a half-deleted report under its own name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "TMP_PREFIX",
    "OLD_PREFIX",
    "STALE_AFTER_S",
    "staged_directory",
    "write_file",
    "commit",
    "clean_stale",
    "remove",
]

TMP_PREFIX = ".graphsafe-tmp~"
OLD_PREFIX = ".graphsafe-old~"
STALE_AFTER_S = 3600.0
_COMMIT_TRIES = 10


def write_file(path: Path, data: bytes | str) -> None:
    """Write ``data`` to a new file and flush it to disk."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with open(path, "xb") as fh:
        fh.write(raw)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def commit(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``, moving an existing ``final`` aside first (the newest write wins)."""
    aside: list[Path] = []
    done = False
    try:
        for _ in range(_COMMIT_TRIES):
            try:
                os.rename(tmp, final)
                done = True
                _fsync_dir(final.parent)
                return
            except OSError:
                if not os.path.lexists(final):
                    raise
            old = final.parent / f"{OLD_PREFIX}{final.name}~{os.getpid()}~{uuid.uuid4().hex[:8]}"
            try:
                os.rename(final, old)
                aside.append(old)
            except FileNotFoundError:  # another writer moved it first; try again
                continue
        raise OSError(f"could not move the report into {final}: another writer keeps replacing it")
    finally:
        if not done and aside and not os.path.lexists(final):
            with contextlib.suppress(OSError):
                os.rename(aside.pop(), final)  # put the previous report back
        for old in aside:
            shutil.rmtree(old, ignore_errors=True)


def _temporary(final: Path) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}~{os.getpid()}~", dir=final.parent))


@contextlib.contextmanager
def staged_directory(final: Path, keep: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``final``; on a clean exit it becomes ``final``.

    On any exception (KeyboardInterrupt included) the temporary directory is
    removed and ``final`` is left exactly as it was.  With ``keep``, a clean exit
    where ``keep(tmp)`` is true removes the temporary directory and leaves
    ``final`` untouched (the existing report says the same).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(final)
    try:
        os.chmod(tmp, 0o755)
        yield tmp
        if keep is not None and keep(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            return
        _fsync_dir(tmp)
        commit(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove(final: Path) -> None:
    """Delete the report directory ``final``: renamed to a temporary name first, then removed."""
    final = Path(final)
    tmp = _temporary(final)
    try:
        os.rename(final, tmp / final.name)  # one rename: the report is there whole, or gone
        _fsync_dir(final.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's), or we cannot tell: keep it
    return True


def _stale(entry: Path, pid: int, now: float) -> bool:
    if pid != os.getpid() and not _pid_alive(pid):
        return True
    try:
        return now - entry.stat().st_mtime > STALE_AFTER_S
    except FileNotFoundError:
        return False


def clean_stale(parent: Path) -> list[Path]:
    """Remove leftovers of interrupted writes in ``parent``; restore an old report moved aside and never replaced.

    Only entries whose writer process is gone (or older than ``STALE_AFTER_S``)
    are touched, so concurrent writers are safe.  Returns the paths removed or restored.
    """
    touched: list[Path] = []
    try:
        entries = list(Path(parent).iterdir())
    except FileNotFoundError:
        return touched
    now = time.time()
    for entry in entries:
        name = entry.name
        if not (name.startswith(TMP_PREFIX) or name.startswith(OLD_PREFIX)):
            continue
        parts = name.split("~")
        if len(parts) < 4:
            continue
        try:
            pid = int(parts[2])
        except ValueError:
            continue
        if not _stale(entry, pid, now):
            continue
        if name.startswith(OLD_PREFIX):
            final = entry.parent / parts[1]
            if not os.path.lexists(final):
                try:
                    os.rename(entry, final)
                    touched.append(final)
                    continue
                except OSError:
                    pass
        shutil.rmtree(entry, ignore_errors=True)
        touched.append(entry)
    return touched
