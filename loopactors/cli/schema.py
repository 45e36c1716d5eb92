"""The node protocol as ``loopactors node`` serves it: the requests it adds to the gateway's
own, and its JSON Schema (``python -m loopactors.cli.schema`` prints it).

``docs/protocol.schema.json`` is this output; a test fails when the two differ.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..gateway import NodeRequest

__all__ = ["node_extensions", "node_schema"]


def node_extensions() -> list[NodeRequest]:
    """The requests a ``loopactors node`` (and the REPL's node) serves besides the protocol's
    own: ``code`` (code loops)."""
    from ..codeloop import CODE_REQUEST  # noqa: PLC0415 - loaded by the commands that serve

    return [CODE_REQUEST]


def node_schema() -> dict[str, Any]:
    from ..gateway import json_schema  # noqa: PLC0415

    return json_schema([(added.frame, added.reply) for added in node_extensions()])


if __name__ == "__main__":
    print(json.dumps(node_schema(), indent=2, sort_keys=True))
