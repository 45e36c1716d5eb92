"""Run-ledger benchmark: `loopactors context` next to the reference loop-context, one run.

    python bench/ledger.py                  # installs the reference with npm into a cache
    python bench/ledger.py --no-reference   # loopactors only
    python bench/ledger.py --quick          # small sizes (CI)

The reference is `@cobusgreyling/loop-context@1.5.0`, installed once with npm into
``$XDG_CACHE_HOME/loopactors/loop-context-1.5.0`` (``~/.cache`` by default) and run with node
directly. Whole processes are timed (start-up included), as a script runs them, each side
alternately, and the median of the repeats is kept; every process's peak RSS is read from
``wait4`` in a small launcher (a process's peak starts from its parent's, so not from this
one), and outputs are compared on disk. Cases:

- ``--check`` on a 10-attempt ledger: the everyday call, so mostly start-up;
- ``--check`` on 100,000 failed attempts with the same error, and with distinct errors;
- ``--summary`` on ledgers of distinct errors (the reference groups them quadratically, so it
  runs only up to ``--reference-max`` errors), with whether both tools print the same;
- loopactors alone (issue 27): each of ``--huge-ops`` on a ledger of one huge error
  (``--huge-error-mb``) and on one of two errors of half that size each, similar, ending the
  trailing failure run; each of ``--stdin-ops`` with the one-error ledger piped to standard
  input; and ``--summary`` on adversarial distinct errors: near the threshold of each other,
  the same after 2,100 unrelated errors (the common-gram sample misses their shared text),
  and with tails of a tiny alphabet. ``--bounds-only`` runs only these.

The machine's load average is printed with the results: on a shared machine compare the two
sides within one run. Prints one table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REFERENCE_PACKAGE = "@cobusgreyling/loop-context@1.5.0"


def reference_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "loopactors" / "loop-context-1.5.0"


def reference_cli(install: bool) -> list[str] | None:
    """The reference's command line, installing it with npm first if asked and missing."""
    script = reference_dir() / "node_modules/@cobusgreyling/loop-context/dist/cli.js"
    node = shutil.which("node")
    if node is None:
        return None
    if not script.exists() and install and shutil.which("npm"):
        reference_dir().mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", str(reference_dir()), "--no-audit", "--no-fund",
             "--loglevel=error", REFERENCE_PACKAGE],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
    return [node, str(script)] if script.exists() else None


def ours_cli() -> list[str]:
    """The installed ``loopactors`` script next to this Python, as a user runs it."""
    script = Path(sys.executable).parent / "loopactors"
    return [str(script)] if script.exists() else [sys.executable, "-m", "loopactors"]


def compile_package() -> None:
    """Write the package's bytecode first, as ``pip install`` does: an editable install run
    with ``PYTHONDONTWRITEBYTECODE`` set would compile every module at every start."""
    import compileall  # noqa: PLC0415

    import loopactors  # noqa: PLC0415

    compileall.compile_dir(Path(loopactors.__file__).parent, quiet=1)


def small_ledger(attempts: int = 10) -> dict[str, Any]:
    outcomes = ["failure", "success", "noop"]
    return {
        "goal": "make the handler pass",
        "attempts": [
            {"iteration": i + 1, "timestamp": f"2026-11-30T10:{i:02d}:00Z",
             "action": f"edit handler, try {i}", "outcome": outcomes[i % 3],
             "error": f"TypeError: x is undefined\n    at f (/app/src/h.js:{i}:5)",
             "tokensUsed": 1200 + i}
            for i in range(attempts)
        ],
    }  # fmt: skip


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


def huge_error_ledger(megabytes: int, seed: int = 3) -> dict[str, Any]:
    """One failed attempt whose error is one line of ``megabytes`` MB of words (issue 27)."""
    rng = random.Random(seed)
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz  ") for _ in range(megabytes * 10**6))
    return {"goal": "one huge error",
            "attempts": [{"iteration": 1, "action": "a", "outcome": "failure",
                          "error": f"Error: {text}"}]}  # fmt: skip


def two_huge_errors_ledger(megabytes: int, seed: int = 3) -> dict[str, Any]:
    """Two failed attempts, each one line of half of ``megabytes`` MB of words, the second
    the first's words shifted (similar: the breaker compares them, the pruner collapses them)."""
    rng = random.Random(seed)
    half = megabytes * 10**6 // 2
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz  ") for _ in range(half))
    return {"goal": "two huge errors",
            "attempts": [{"iteration": 1, "action": "a", "outcome": "failure",
                          "error": f"Error: {text}"},
                         {"iteration": 2, "action": "b", "outcome": "failure",
                          "error": f"Error: {text[7:]} end\n    at f (x.js:1:2)"}]}  # fmt: skip


def near_threshold_ledger(errors: int, seed: int = 1) -> dict[str, Any]:
    """Errors sharing a long text with distinct tails, each pair just below (or, by chance,
    above) the summary's 0.85 similarity: the grouping's adversarial case (issue 27)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    base = "".join(rng.choice(letters + " ") for _ in range(1000))
    return {"goal": "group these",
            "attempts": [{"iteration": i + 1, "action": "a", "outcome": "failure",
                          "error": base + " " + "".join(rng.choice(letters) for _ in range(92))}
                         for i in range(errors)]}  # fmt: skip


def late_shared_text_ledger(errors: int, unrelated: int = 2100, seed: int = 1) -> dict[str, Any]:
    """``unrelated`` errors of random words, then ``errors`` near-threshold ones sharing 1,000
    characters: the common grams, sampled from the first 2,048 distinct errors, miss the
    shared text (docs/ledger.md)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    base = "".join(rng.choice(letters + " ") for _ in range(1000))
    texts = [
        "Setup: " + " ".join("".join(rng.choice(letters) for _ in range(7)) for _ in range(8))
        for _ in range(unrelated)
    ]
    texts += [base + " " + "".join(rng.choice(letters) for _ in range(92)) for _ in range(errors)]
    return {"goal": "group these",
            "attempts": [{"iteration": i + 1, "action": "a", "outcome": "failure", "error": text}
                         for i, text in enumerate(texts)]}  # fmt: skip


def tiny_alphabet_ledger(errors: int, seed: int = 1) -> dict[str, Any]:
    """Errors sharing 600 characters, each with a tail of 300 letters of 8 kinds: every
    gram is common, so heads are told apart by a mask test each (docs/ledger.md)."""
    rng = random.Random(seed)
    base = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(600))
    return {"goal": "group these",
            "attempts": [{"iteration": i + 1, "action": "a", "outcome": "failure",
                          "error": base + " " + "".join(rng.choice("abcdefgh") for _ in range(300))}
                         for i in range(errors)]}  # fmt: skip


def write_bound_ledgers(directory: Path, megabytes: str, errors: int) -> None:
    (directory / "small.json").write_text(json.dumps(small_ledger()))
    for size in megabytes.split(","):
        (directory / f"huge-error-{size}.json").write_text(json.dumps(huge_error_ledger(int(size))))
        two = two_huge_errors_ledger(int(size))
        (directory / f"two-huge-{size}.json").write_text(json.dumps(two))
    (directory / "near-threshold.json").write_text(json.dumps(near_threshold_ledger(errors)))
    (directory / "late-shared.json").write_text(json.dumps(late_shared_text_ledger(errors)))
    (directory / "tiny-alphabet.json").write_text(json.dumps(tiny_alphabet_ledger(errors)))


def write_ledgers(directory: Path, attempts: int, summary_sizes: str) -> None:
    ledgers = {
        "small": small_ledger(),
        "same": same_error_ledger(attempts),
        "distinct": distinct_error_ledger(attempts),
    }
    ledgers.update(
        (f"summary-{size}", distinct_error_ledger(int(size))) for size in summary_sizes.split(",")
    )
    for name, ledger in ledgers.items():
        (directory / f"{name}.json").write_text(json.dumps(ledger))


class Run:
    def __init__(self, seconds: float, output: Path, code: int, rss_kib: int, cpu: float) -> None:
        self.seconds, self.output, self.code = seconds, output, code
        self.rss_kib, self.cpu_seconds = rss_kib, cpu


#: A summary's group, as ``--summary --json`` indents it (a string holds no raw newline).
GROUP_LINE = b'      "signature": '


#: Runs one command and writes its wall time, exit code, peak RSS and CPU time to a file. A
#: process's peak RSS starts from its parent's (it is carried over the fork and the exec),
#: so the runs are started from this small interpreter (~8 MiB, no site), not from the bench.
#: ``--stdin PATH`` first: the file is piped to the command's standard input by ``cat``.
LAUNCHER = """
import os, sys, time
report, *command = sys.argv[1:]
actions = []
if command[0] == "--stdin":
    path, command = command[1], command[2:]
    read, write = os.pipe()
    cat = os.posix_spawn("/bin/cat", ["cat", path], os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, write, 1)])
    os.close(write)
    actions = [(os.POSIX_SPAWN_DUP2, read, 0)]
start = time.perf_counter()
pid = os.posix_spawn(command[0], command, os.environ, file_actions=actions)
if actions:
    os.close(read)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - start
with open(report, "w") as out:
    code = os.waitstatus_to_exitcode(status)
    out.write(f"{seconds} {code} {usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
"""


def timed(command: list[str], path: Path, output: Path, stdin: bool = False) -> Run:
    """One whole process: wall time, exit code, peak RSS and CPU time (from wait4, in a
    small launcher); its output is left in ``output``, never read into this process.
    ``stdin``: the ledger is piped to its standard input instead of named with ``-f``."""
    report = output.with_suffix(output.suffix + ".usage")
    where = ["--stdin", str(path), *command] if stdin else [*command, "-f", str(path)]
    with output.open("wb") as out:
        subprocess.run(
            [sys.executable, "-S", "-c", LAUNCHER, str(report), *where],
            stdout=out, check=True,
        )  # fmt: skip
    seconds, code, rss_kib, cpu = report.read_text().split()
    report.unlink()
    return Run(float(seconds), output, int(code), int(rss_kib), float(cpu))


def launcher_rss() -> int | None:
    """About the launcher's own peak RSS (the same interpreter and imports), KiB: its
    memory's high-water mark (getrusage would report the bench's, carried over the exec)."""
    code = "import os, sys, time; print(open('/proc/self/status').read())"
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], check=False, capture_output=True, text=True
    )
    for line in result.stdout.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def same_file(a: Path, b: Path) -> bool:
    with a.open("rb") as first, b.open("rb") as second:
        while True:
            x, y = first.read(1 << 16), second.read(1 << 16)
            if x != y:
                return False
            if not x:
                return True


def count_groups(output: Path) -> int:
    with output.open("rb") as lines:
        return sum(line.startswith(GROUP_LINE) for line in lines)


def measure(
    case: str,
    path: Path,
    args: list[str],
    *,
    ours: list[str],
    ref: list[str] | None,
    repeats: int,
    stdin: bool = False,
) -> dict[str, Any]:
    """Both sides alternately ``repeats`` times; medians of the times, peaks of the RSS."""
    our_runs: list[Run] = []
    ref_runs: list[Run] = []
    for i in range(repeats):
        output = path.with_suffix(f".ours{i}")
        our_runs.append(timed([*ours, "context", *args], path, output, stdin=stdin))
        if ref is not None:
            ref_runs.append(timed([*ref, *args], path, path.with_suffix(f".ref{i}")))
    row: dict[str, Any] = {
        "case": case,
        "file_bytes": path.stat().st_size,
        "loopactors_s": statistics.median(r.seconds for r in our_runs),
        "loopactors_runs_s": [round(r.seconds, 4) for r in our_runs],
        "loopactors_cpu_s": statistics.median(r.cpu_seconds for r in our_runs),
        "loopactors_rss_kib": max(r.rss_kib for r in our_runs),
        "exit": our_runs[0].code,
    }
    if ref_runs:
        row.update(
            reference_s=statistics.median(r.seconds for r in ref_runs),
            reference_runs_s=[round(r.seconds, 4) for r in ref_runs],
            reference_cpu_s=statistics.median(r.cpu_seconds for r in ref_runs),
            reference_rss_kib=max(r.rss_kib for r in ref_runs),
            same_output=same_file(ref_runs[0].output, our_runs[0].output)
            and ref_runs[0].code == our_runs[0].code,
        )
        row["ratio"] = row["loopactors_s"] / row["reference_s"]
        row["cpu_ratio"] = row["loopactors_cpu_s"] / row["reference_cpu_s"]
    if "--summary" in args:
        row["groups"] = count_groups(our_runs[0].output)
    for run in (*our_runs, *ref_runs):
        run.output.unlink()
    return row


def measure_everyday(
    args: argparse.Namespace, ours: list[str], ref: list[str] | None, rows: list[dict[str, Any]]
) -> None:
    """The --check and distinct-error --summary cases."""
    with tempfile.TemporaryDirectory() as tmp:
        # Written by a child process: a child's peak RSS starts from its parent's size at the
        # fork, so this process stays small.
        subprocess.run(
            [sys.executable, __file__, "--write-into", tmp,
             f"--check-attempts={args.check_attempts}", f"--summary-sizes={args.summary_sizes}"],
            check=True,
        )  # fmt: skip
        paths = {name: Path(tmp) / f"{name}.json" for name in ("small", "same", "distinct")}
        n = f"{args.check_attempts:,}"
        check = ["--check", "--json"]
        rows.append(
            measure("--check, 10 attempts (start-up)", paths["small"], check, ours=ours, ref=ref,
                    repeats=args.startup_repeats)
        )  # fmt: skip
        rows.append(
            measure(f"--check, {n} same-error failures", paths["same"], check, ours=ours, ref=ref,
                    repeats=args.repeats)
        )  # fmt: skip
        rows.append(
            measure(f"--check, {n} distinct-error failures", paths["distinct"], check,
                    ours=ours, ref=ref, repeats=args.repeats)
        )  # fmt: skip
        for size in (int(s) for s in args.summary_sizes.split(",")):
            path = Path(tmp) / f"summary-{size}.json"
            rows.append(
                measure(f"--summary, {size:,} distinct errors", path, ["--summary", "--json"],
                        ours=ours, ref=ref if size <= args.reference_max else None,
                        repeats=args.summary_repeats)
            )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--check-attempts", type=int, default=100_000)
    parser.add_argument("--summary-sizes", default="1000,4000,10000,50000")
    parser.add_argument("--reference-max", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3, help="for the large --check cases")
    parser.add_argument("--summary-repeats", type=int, default=1)
    parser.add_argument("--startup-repeats", type=int, default=15)
    parser.add_argument("--write-into", help=argparse.SUPPRESS)
    parser.add_argument("--bounds-into", help=argparse.SUPPRESS)
    parser.add_argument(
        "--bounds-only", action="store_true",
        help="only the issue-27 cases: one huge error, and near-threshold distinct errors",
    )  # fmt: skip
    parser.add_argument(
        "--huge-error-mb", default="20,50", help="sizes of the one-huge-error ledgers, MB"
    )
    parser.add_argument(
        "--huge-ops", default="--summary;--summary --json;--check --json;--status;--inject",
        help="the operations run on each one-huge-error ledger, separated by ';'",
    )  # fmt: skip
    parser.add_argument(
        "--stdin-ops", default="--summary;--inject",
        help="the operations run on each one-huge-error ledger piped to standard input",
    )  # fmt: skip
    parser.add_argument("--near-threshold", type=int, default=5000)
    parser.add_argument("--no-bounds", action="store_true", help="leave out the issue-27 cases")
    args = parser.parse_args()
    if args.bounds_into:
        write_bound_ledgers(Path(args.bounds_into), args.huge_error_mb, args.near_threshold)
        return
    if args.write_into:
        write_ledgers(Path(args.write_into), args.check_attempts, args.summary_sizes)
        return
    if args.quick:
        args.check_attempts, args.summary_sizes, args.reference_max = 2000, "200,1000", 200
        args.repeats, args.startup_repeats = 1, 3
        args.huge_error_mb, args.near_threshold = "2", 500
    ref = None if args.no_reference else reference_cli(install=True)
    if not args.no_reference and ref is None:
        print("the reference is not available (needs node and npm); running loopactors alone")
    ours = ours_cli()
    compile_package()
    load_before = os.getloadavg()

    rows: list[dict[str, Any]] = []
    if not args.bounds_only:
        measure_everyday(args, ours, ref, rows)
    if not args.no_bounds:
        measure_bounds(args, ours, rows)
    finish(args, rows, load_before)


def measure_bounds(args: argparse.Namespace, ours: list[str], rows: list[dict[str, Any]]) -> None:
    """The issue-27 cases: one huge error, adversarial distinct errors (loopactors alone)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, __file__, "--bounds-into", tmp,
             f"--huge-error-mb={args.huge_error_mb}", f"--near-threshold={args.near_threshold}"],
            check=True,
        )  # fmt: skip
        if args.bounds_only:  # the memory baseline (see report)
            rows.append(
                measure("--check, 10 attempts (start-up)", Path(tmp) / "small.json",
                        ["--check", "--json"], ours=ours, ref=None, repeats=3)
            )  # fmt: skip
        # The reference is left out: it groups the near-threshold errors quadratically.
        for size in args.huge_error_mb.split(","):
            for op in args.huge_ops.split(";"):
                rows.append(
                    measure(f"{op}, one {size} MB error", Path(tmp) / f"huge-error-{size}.json",
                            op.split(), ours=ours, ref=None, repeats=1)
                )  # fmt: skip
            for op in args.huge_ops.split(";"):
                rows.append(
                    measure(f"{op}, two {size} MB errors", Path(tmp) / f"two-huge-{size}.json",
                            op.split(), ours=ours, ref=None, repeats=1)
                )  # fmt: skip
            for op in filter(None, args.stdin_ops.split(";")):
                rows.append(
                    measure(f"{op}, one {size} MB error, stdin",
                            Path(tmp) / f"huge-error-{size}.json", op.split(), ours=ours,
                            ref=None, repeats=1, stdin=True)
                )  # fmt: skip
        rows.append(
            measure(f"--summary, {args.near_threshold:,} near-threshold errors",
                    Path(tmp) / "near-threshold.json", ["--summary", "--json"], ours=ours,
                    ref=None,
                    repeats=1)
        )  # fmt: skip
        rows.append(
            measure(f"--summary, 2,100 + {args.near_threshold:,} late shared text",
                    Path(tmp) / "late-shared.json", ["--summary", "--json"], ours=ours,
                    ref=None, repeats=1)
        )  # fmt: skip
        rows.append(
            measure(f"--summary, {args.near_threshold:,} tiny-alphabet tails",
                    Path(tmp) / "tiny-alphabet.json", ["--summary", "--json"], ours=ours,
                    ref=None, repeats=1)
        )  # fmt: skip


def finish(
    args: argparse.Namespace, rows: list[dict[str, Any]], load_before: tuple[float, ...]
) -> None:
    load_after = os.getloadavg()
    node = shutil.which("node")
    machine = {
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "node": subprocess.run(
            [node, "--version"], check=False, capture_output=True, text=True
        ).stdout.strip()
        if node
        else None,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        # The floor of every run's peak RSS (the launcher's, see LAUNCHER).
        "launcher_rss_kib": launcher_rss(),
    }
    sizes = [] if args.bounds_only else [int(s) for s in args.summary_sizes.split(",")]
    report(machine, rows, sizes)


def report(machine: dict[str, Any], rows: list[dict[str, Any]], sizes: list[int]) -> None:
    load_before, load_after = machine["load_before"], machine["load_after"]
    print(
        f"machine: {machine['machine']}, {machine['cores']} cores, Python {machine['python']}, "
        f"node {machine['node']}; load average before {load_before[0]:.2f}, "
        f"after {load_after[0]:.2f}"
    )
    header = (
        f"{'case':<46}{'loopactors':>11}{'reference':>11}{'speed-up':>9}{'CPU ours':>10}"
        f"{'CPU ref':>10}{'speed-up':>9}{'RSS ours':>10}{'RSS ref':>10}  same"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        reference: float | None = row.get("reference_s")
        speedup = f"{reference / row['loopactors_s']:.1f}x" if reference else "-"
        shown = f"{reference:.3f}s" if reference else "-"
        ref_rss = f"{row['reference_rss_kib'] / 1024:.0f} MiB" if reference else "-"
        ref_cpu: float | None = row.get("reference_cpu_s")
        cpu_shown = f"{ref_cpu:.3f}s" if ref_cpu else "-"
        cpu_speedup = f"{ref_cpu / row['loopactors_cpu_s']:.1f}x" if ref_cpu else "-"
        print(
            f"{row['case']:<46}{row['loopactors_s']:>10.3f}s{shown:>11}{speedup:>9}"
            f"{row['loopactors_cpu_s']:>9.3f}s{cpu_shown:>10}{cpu_speedup:>9}"
            f"{row['loopactors_rss_kib'] / 1024:>6.0f} MiB{ref_rss:>10}  "
            f"{row.get('same_output', '-')}"
        )
    summaries = {r["case"]: r["loopactors_s"] for r in rows if r["case"].startswith("--summary")}
    if len(sizes) >= 2:
        small, large = sizes[-2], sizes[-1]
        growth = (
            summaries[f"--summary, {large:,} distinct errors"]
            / summaries[f"--summary, {small:,} distinct errors"]
        )
        print(f"--summary growth, {large:,} / {small:,} errors: {growth:.2f}x time")
    baseline = rows[0]["loopactors_rss_kib"]
    for row in rows[1:]:
        extra = (row["loopactors_rss_kib"] - baseline) * 1024
        print(
            f"{row['case']}: peak RSS {row['loopactors_rss_kib'] / 1024:.0f} MiB, "
            f"{extra / row['file_bytes']:.2f}x the file above the 10-attempt run's "
            f"{baseline / 1024:.0f} MiB"
        )
    print(json.dumps({"bench": "ledger", **machine, "rows": rows}))


if __name__ == "__main__":
    main()
