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
    lint-imports

# Fuzz long: `loopactors context`, the |loop| parser, and a live node's websocket protocol
# (CI runs a short version of the same suites).
fuzz:
    LOOPACTORS_FUZZ_EXAMPLES=20000 pytest tests/fuzz -q

# Proof under load: many loops with crashes and stops, SIGKILL trials, then a node whose
# gateway is flooded (docs/stress.md).
stress:
    loopactors stress --loops 10000 --rounds 5 --crash-rate 0.01 --stop-rate 0.05
    loopactors stress --loops 200 --rounds 5 --state "$(mktemp -d)" --kill-trials 50
    loopactors stress --gateway-flood --connections 2000 --descriptors 1024 --loops 20 --rounds 5

# How rounds/s, latency and memory grow from 10 to 50,000 loops (docs/benchmarks.md).
scaling:
    pip install -e '.[bench]' && python bench/scaling.py

# docs/img/dashboard.png: the dashboard of a node with 50 loops, in headless Chromium.
screenshot:
    python docs/build_screenshot.py

# The docs build: the protocol's JSON Schema and the dashboard's screenshot, from the code.
docs:
    python -m loopactors.cli.schema > docs/protocol.schema.json
    python docs/build_screenshot.py
