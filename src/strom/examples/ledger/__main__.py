"""``python -m strom.examples.ledger generate|run|serve|query``."""

from strom.examples.ledger.cli import main

raise SystemExit(main())
