"""The node protocol as ``loopactors node`` serves it: the requests it adds to the gateway's
own, and its JSON Schema (``python -m loopactors.cli.schema`` prints it).

``docs/protocol.schema.json`` is this output; a test fails when the two differ.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..gateway import NodeRequest

__all__ = ["node_extensions", "node_schema"]


#: The requests this package adds to a node, registered as a third party's would be.
_BUILT_IN = {"code": "loopactors.codeloop:CODE_REQUEST"}


def node_extensions() -> list[NodeRequest]:
    """The requests a ``loopactors node`` serves besides the protocol's own: ``code`` (code
    loops) and every request registered (``gateway.register_node_request`` or the entry-point
    group ``loopactors.node_requests``). Imported only by the commands that serve."""
    from ..gateway import node_requests, register_node_request  # noqa: PLC0415

    for name, target in _BUILT_IN.items():
        with contextlib.suppress(ValueError):  # registered by an earlier call
            register_node_request(name, target)
    return node_requests()


def node_schema() -> dict[str, Any]:
    from ..gateway import json_schema  # noqa: PLC0415

    return json_schema([(added.frame, added.reply) for added in node_extensions()])


if __name__ == "__main__":
    print(json.dumps(node_schema(), indent=2, sort_keys=True))
