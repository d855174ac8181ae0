"""Shared fixtures.

The brokers of the tests run on the one-voter metadata quorum, the product default of
``strom.metadata.quorum.enable``. ``STROM_TEST_QUORUM=0`` runs them on the JSON topic registry
instead (for comparison), ``STROM_TEST_QUORUM=1`` forces the quorum: the default of the flag is set
for this test process, and :class:`strom.testing.broker_process.BrokerProcess` passes it to the
brokers it starts (a test's explicit setting wins).
Tests that are about one path only set the config explicitly or skip with a reason.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.config_schema import BROKER_CONFIGS
from strom.log.file_cache import FILE_CACHE
from strom.testing.broker_process import BrokerProcess

QUORUM_ENABLE = "strom.metadata.quorum.enable"
_FORCED = {"1": True, "0": False}.get(os.environ.get("STROM_TEST_QUORUM", ""))
if _FORCED is not None:
    BROKER_CONFIGS[QUORUM_ENABLE] = dataclasses.replace(BROKER_CONFIGS[QUORUM_ENABLE], default=_FORCED)
TEST_QUORUM = bool(BROKER_CONFIGS[QUORUM_ENABLE].default)  # this run's brokers are on the quorum


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
