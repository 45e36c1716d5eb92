"""The wall-clock bounds of the tests that wait on real processes, sockets or threads.

Such a bound only guards against a hang: it is never a timing check (timing goals live in
bench/), so it is long enough that no loaded machine reaches it by being slow. Tests that need
time to pass use trio's autojump clock instead, and events rather than sleeps.
"""

from __future__ import annotations

#: How long a test waits for something that must happen before calling it a hang.
HANG = 600.0

#: HANG in milliseconds (a browser test's waits).
HANG_MS = HANG * 1000

#: "Promptly", where the alternative is "never" (a stop that must not wait for a catastrophic
#: regex, a node that must not freeze): far longer than the slowest loaded machine needs, far
#: shorter than never.
PROMPT = 120.0
