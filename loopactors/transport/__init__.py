"""Transports: where the Dispatcher's rounds run.

An adapter of the runtime's round transport interface (``runtime.RoundTransport``), above
the runtime: the runtime's registry names :data:`REDIS` for ``redis://`` and ``rediss://``
and never imports this package.

General layout: ``_base`` (rounds run in other processes), ``_url`` (the URLs' form, and
:data:`REDIS`), ``_wire`` (what travels through Redis), ``_backoff`` and ``_redis`` (the client
and its retries), ``_node`` (the node's side: publish orders, collect reports), ``_worker`` (a
worker process), ``_status`` (workers and backlog for ``loopactors status``), ``_cli`` (the
``worker`` command), ``_local`` (a private redis-server for tests, examples and benchmarks).
All private; this module is the public surface. The Redis parts (:class:`RedisTransport`,
:func:`serve_worker`) load coredis on first use.
"""

from .._lazy import lazy_names
from .._util import fix_public_module

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ._base import RemoteTransport as RemoteTransport
    from ._cli import print_status as print_status
    from ._cli import status_data as status_data
    from ._local import LocalRedis as LocalRedis
    from ._local import local_redis as local_redis
    from ._node import RedisTransport as RedisTransport
    from ._url import IN_PROCESS as IN_PROCESS
    from ._url import REDIS as REDIS
    from ._url import check_transport as check_transport
    from ._url import redact_url as redact_url
    from ._worker import WorkerSettings as WorkerSettings
    from ._worker import serve_worker as serve_worker

__all__ = [
    "IN_PROCESS",
    "REDIS",
    "LocalRedis",
    "RedisTransport",
    "RemoteTransport",
    "WorkerSettings",
    "check_transport",
    "local_redis",
    "print_status",
    "redact_url",
    "serve_worker",
    "status_data",
]

# Every name loads its module on first use: the command line's parser imports ``_cli`` (and
# so this package) for ``loopactors status``, which must not pay for the workers and trio.
_LAZY = {
    "IN_PROCESS": "_url",
    "REDIS": "_url",
    "LocalRedis": "_local",
    "RedisTransport": "_node",
    "RemoteTransport": "_base",
    "WorkerSettings": "_worker",
    "check_transport": "_url",
    "local_redis": "_local",
    "print_status": "_cli",
    "redact_url": "_url",
    "serve_worker": "_worker",
    "status_data": "_cli",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, __all__, fix=fix_public_module)
