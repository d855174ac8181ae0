from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.log.file_cache import FILE_CACHE
from strom.testing.broker_process import BrokerProcess


@pytest.fixture(autouse=True)
def _close_cached_log_files() -> Iterator[None]:
    """Logs opened in the test process keep their segment files in the process-wide descriptor
    LRU (capacity: half of ``ulimit -n``) after the test; close them after each test. Left open,
    a few thousand accumulated over the property tests and then broke the Spark tests' py4j
    callback server, which cannot select() on a descriptor above 1024."""
    yield
    FILE_CACHE.close_idle()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A real strom broker process on a free loopback port, fresh data dir."""
    b = BrokerProcess(tmp_path / "data", overrides=["group.initial.rebalance.delay.ms=0"])
    b.start()
    try:
        yield b
    finally:
        rc = b.stop()
        if rc not in (0, -15):
            print(b.log())


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module (faster; tests use distinct topic names)."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("shared") / "data", overrides=["group.initial.rebalance.delay.ms=0"]
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()
