"""Run-ledger benchmark: `loopactors context` next to the reference loop-context, one run.

    python bench/ledger.py                  # needs npx (the npm registry) for the reference
    python bench/ledger.py --no-reference   # loopactors only

Whole processes are timed (start-up included), as a script would run them:

- ``--check`` on 100,000 failed attempts with the same error;
- ``--summary`` on ledgers of distinct errors (the reference groups them quadratically, so it
  runs only up to ``--reference-max`` errors), and whether both tools group alike.

Prints one table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REFERENCE = ["npx", "-y", "@cobusgreyling/loop-context@1.5.0"]
OURS = [sys.executable, "-m", "loopactors", "context"]


def same_error_ledger(attempts: int) -> dict[str, Any]:
    error = (
        "TypeError: Cannot read properties of undefined (reading 'id')\n"
        "    at handler (app.js:12:5)"
    )
    return {
        "goal": "make the handler pass",
        "attempts": [
            {"iteration": i + 1, "action": f"retry {i}", "outcome": "failure", "error": error,
             "tokensUsed": 100}
            for i in range(attempts)
        ],
    }  # fmt: skip


def distinct_error_ledger(errors: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choice(letters) for _ in range(7)) for _ in range(2000)]
    attempts = []
    for i in range(errors):
        words = " ".join(rng.choice(vocabulary) for _ in range(6))
        attempts.append(
            {"iteration": i + 1, "action": f"try {words[:20]}", "outcome": "failure",
             "error": f"Error: {words}"}
        )  # fmt: skip
    return {"goal": "group these", "attempts": attempts}


def timed(command: list[str], path: Path) -> tuple[float, str, int]:
    start = time.perf_counter()
    result = subprocess.run(
        [*command, "-f", str(path)], capture_output=True, text=True, check=False, timeout=3600
    )
    return time.perf_counter() - start, result.stdout, result.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--check-attempts", type=int, default=100_000)
    parser.add_argument("--summary-sizes", default="1000,4000,10000")
    parser.add_argument("--reference-max", type=int, default=4000)
    args = parser.parse_args()
    use_reference = not args.no_reference
    if use_reference:  # warm npx's cache so the download is not timed
        subprocess.run([*REFERENCE, "--help"], capture_output=True, check=False, timeout=600)

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        check_file = Path(tmp) / "check.json"
        check_file.write_text(json.dumps(same_error_ledger(args.check_attempts)))
        ours, our_out, our_code = timed([*OURS, "--check", "--json"], check_file)
        row: dict[str, Any] = {
            "case": f"--check, {args.check_attempts:,} same-error failures",
            "loopactors_s": ours, "exit": our_code,
        }  # fmt: skip
        if use_reference:
            ref, ref_out, ref_code = timed([*REFERENCE, "--check", "--json"], check_file)
            row.update(reference_s=ref, same_output=ref_out == our_out and ref_code == our_code)
        rows.append(row)

        for size in (int(s) for s in args.summary_sizes.split(",")):
            path = Path(tmp) / f"summary-{size}.json"
            path.write_text(json.dumps(distinct_error_ledger(size)))
            ours, our_out, _ = timed([*OURS, "--summary", "--json"], path)
            row = {"case": f"--summary, {size:,} distinct errors", "loopactors_s": ours}
            groups = len(json.loads(our_out)["distinctErrors"]) if our_out else None
            row["groups"] = groups
            if use_reference and size <= args.reference_max:
                ref, ref_out, _ = timed([*REFERENCE, "--summary", "--json"], path)
                row.update(reference_s=ref, same_output=ref_out == our_out)
            rows.append(row)

    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"machine: {machine}")
    header = f"{'case':<44}{'loopactors':>12}{'reference':>12}{'speed-up':>10}  same output"
    print(header)
    print("-" * len(header))
    for row in rows:
        reference: float | None = row.get("reference_s")
        speedup = f"{reference / row['loopactors_s']:.1f}x" if reference else "-"
        shown = f"{reference:.2f}s" if reference else "-"
        print(
            f"{row['case']:<44}{row['loopactors_s']:>11.2f}s"
            f"{shown:>12}{speedup:>10}  {row.get('same_output', '-')}"
        )
    print(json.dumps({"bench": "ledger", "rows": rows}))


if __name__ == "__main__":
    main()
