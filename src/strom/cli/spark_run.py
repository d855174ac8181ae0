"""What the foreground Spark commands (``strom connect run``, ``strom mirror run``) share: their
logging, the check of ``--trigger-interval-ms`` and the Ctrl-C/SIGTERM that stops them."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any


def begin_run(prog: str, trigger_interval_ms: int) -> bool:
    """Starts a run's INFO logging (py4j's silenced: it logs a failed foreachBatch's
    traceback); False, after one error line on stderr, when ``trigger_interval_ms`` is below 1."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    if trigger_interval_ms < 1:
        print(f"{prog}: error: --trigger-interval-ms must be at least 1", file=sys.stderr)
        return False
    return True


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (instead of KeyboardInterrupt)."""
    stopping = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stopping
