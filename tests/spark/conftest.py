"""Fixtures for the Spark data source tests: one local SparkSession per test session (local[2],
UI off, two shuffle partitions) and a real strom broker per module."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from strom.client import Client
from strom.testing.broker_process import BrokerProcess

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from strom.spark import StromDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("strom-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(StromDataSource)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A strom broker for a test module (tests use distinct topic names)."""
    b = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def registry(kbroker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A strom schema registry on the module's broker; its URL."""
    from strom.testing.registry_process import RegistryProcess

    reg = RegistryProcess(kbroker.bootstrap, tmp_path_factory.mktemp("sr") / "registry.log")
    try:
        yield reg.start(timeout=60).url
    finally:
        reg.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    async def go() -> None:
        async with Client(bootstrap) as c:
            res = await c.create_topics({topic: (partitions, 1)})
            if res[topic] is not None:
                raise res[topic]

    run(go())


def produce(bootstrap: str, topic: str, partition: int, records: Sequence[Record]) -> int:
    async def go() -> int:
        async with Client(bootstrap) as c:
            return await c.produce(topic, partition, list(records))

    result: int = run(go())
    return result


def values(prefix: str, n: int, start: int = 0, ts: int = 1_700_000_000_000) -> list[Record]:
    return [(f"k{i}".encode(), f"{prefix}-{i}".encode(), [], ts + i) for i in range(start, start + n)]
