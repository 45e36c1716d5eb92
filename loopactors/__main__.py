"""`python -m loopactors` is the `loopactors` command."""

from .cli import main

raise SystemExit(main())
