"""The ledger is pure: importing it loads neither trio nor the runtime."""

from __future__ import annotations

import subprocess
import sys

from tests.hang import HANG


def test_importing_the_ledger_loads_no_trio() -> None:
    code = (
        "import sys, loopactors.ledger; "
        "print('trio' in sys.modules, 'loopactors.runtime' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=HANG
    )
    assert result.stdout.split() == ["False", "False"]
