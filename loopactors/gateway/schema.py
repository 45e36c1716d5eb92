"""Print the node protocol's JSON Schema: ``python -m loopactors.gateway.schema``.

``docs/protocol.schema.json`` is this output; a test fails when the two differ.
"""

import json

from ._protocol import json_schema

if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
