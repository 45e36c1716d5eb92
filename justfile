# The README's two commands, and the chores around them.

# Run the main job on embedded defaults (README, first command).
demo:
    pip install -e . && loopactors demo

# Install the dev extras and run the whole test suite (README, second command).
test:
    pip install -e '.[dev]' && pytest

# Benchmarks next to plain trio: the actor kernel, then 10,000 concurrent loops.
bench:
    python bench/actors.py
    python bench/loops.py
    python bench/node.py

# Lint, format check and strict type check, as CI runs them.
lint:
    ruff check .
    ruff format --check .
    mypy

# Fuzz `loopactors context` long (CI runs a short version of the same suite).
fuzz:
    LOOPACTORS_FUZZ_EXAMPLES=20000 pytest tests/fuzz -q
