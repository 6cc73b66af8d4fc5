"""``python -m interpreter``: the same as the ``interp`` command."""

from interpreter.cli import main

raise SystemExit(main())
