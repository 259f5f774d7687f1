"""Where a check keeps the failing examples Hypothesis found, so that the next run replays them first.

A check's example database is, in order:

1. the ``database`` option (:class:`~graphsafe.CheckOptions`, ``--database``, ``--graphsafe-database``):
   a directory, a Redis URL (``redis://host:port/db``, ``rediss://`` with TLS, ``unix:///path.sock``),
   or ``False`` for none;
2. ``$GRAPHSAFE_DB``, in the same forms;
3. ``.hypothesis/graphsafe`` in the current directory, unless the Hypothesis profile keeps no database
   (graphsafe's ``ci`` profile keeps none).

A location the user names (1 or 2) is used under every profile, ``ci`` included: that is how the
machines of a CI matrix share what they found.  Both forms are Hypothesis' own databases
(:class:`~hypothesis.database.DirectoryBasedExampleDatabase`,
:class:`~hypothesis.extra.redis.RedisExampleDatabase`, which needs the ``redis`` client: the
``redis`` extra).  Each search (target, engine, capture policy, probe set) has an entry of its own:
a sub-directory, or a key prefix in Redis.

Example::

    example_database("flex-emulate-worst-lazy-init", "redis://ci-cache:6379/0")  # a RedisExampleDatabase
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from ..errors import UsageError

__all__ = ["ENV", "DEFAULT_DIR", "REDIS_SCHEMES", "location", "is_redis", "example_database"]

#: the environment variable naming the database
ENV = "GRAPHSAFE_DB"
#: the directory used when neither the option nor ``$GRAPHSAFE_DB`` names one
DEFAULT_DIR = os.path.join(".hypothesis", "graphsafe")
#: the URL schemes that select Redis; anything else is a directory
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
#: the Redis key prefix of graphsafe's entries (then the search's name)
_PREFIX = "graphsafe:"


def is_redis(where: str) -> bool:
    """True for a Redis URL (see :data:`REDIS_SCHEMES`)."""
    return where.strip().lower().startswith(REDIS_SCHEMES)


def location(database: str | bool | None) -> str | bool | None:
    """The database the user named: the option, else ``$GRAPHSAFE_DB``; ``False`` for none; None when
    neither says (the profile decides)."""
    if database is not None:
        return database
    return os.environ.get(ENV) or None


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def example_database(name: str, database: str | bool | None) -> ExampleDatabase | None:
    """The database of the search called ``name`` (see the module docstring); None for none."""
    where = location(database)
    if where is False:
        return None
    if where is None or where is True:
        if settings().database is None:  # the current profile keeps none
            return None
        where = DEFAULT_DIR
    if is_redis(where):
        client = _redis(where)  # first: a clear error where the redis package is missing
        from hypothesis.extra.redis import RedisExampleDatabase  # imports redis: only where Redis is asked for

        return RedisExampleDatabase(client, key_prefix=f"{_PREFIX}{_slug(name)}:".encode())
    return DirectoryBasedExampleDatabase(os.path.join(where, _slug(name)))


@functools.cache
def _redis(url: str) -> Any:
    """One client per URL for the process, checked once: a server that cannot be reached is a usage error
    before the search starts, not an error in the middle of it."""
    try:
        import redis  # the redis extra: only where a Redis URL is given
    except ImportError:
        raise UsageError(
            f"example database {url!r} is a Redis URL, but the redis package is not installed; "
            "install it (pip install 'graphsafe[redis]') or give a directory"
        ) from None
    try:
        client = redis.Redis.from_url(url)
    except ValueError as e:
        raise UsageError(f"example database {url!r}: not a Redis URL redis can use ({e})") from None
    try:
        client.ping()
    except redis.RedisError as e:
        raise UsageError(
            f"example database {url!r}: cannot reach the Redis server ({e}); start it, fix the URL, or unset {ENV}"
        ) from None
    return client
