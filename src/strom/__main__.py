"""``python -m strom`` is the ``strom`` command."""

from strom.cli.main import main

raise SystemExit(main())
