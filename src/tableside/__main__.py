"""``python -m tableside`` is the same as the ``tableside`` command."""

from tableside.cli import main

raise SystemExit(main())
