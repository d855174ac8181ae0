"""``strom sql`` on a real broker and local Spark: the page views example run as a ``--file``
(counts per region and window read back read_committed, against counts computed here from the
generated data), a CREATE TABLE AS SELECT with GROUP BY, a push query, a pull query through the
state server, and the catalog surviving a restart of the shell."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess

from .test_streams import read_committed

pytestmark = [pytest.mark.spark, pytest.mark.integration]

EXAMPLE = Path(__file__).resolve().parents[2] / "src" / "strom" / "examples" / "pageviews" / "pageviews.sql"


def sql(spark: Any, kbroker: BrokerProcess, state: Path, *args: str) -> int:
    from strom.streams.sql.shell import main

    return main(["--bootstrap-server", kbroker.bootstrap, "--state-dir", str(state), *args], spark=spark)


def test_pageviews_example_counts_per_region_and_window(
    spark: Any, kbroker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from strom.examples.pageviews import generate as g

    g.produce(kbroker.bootstrap, 4, 60, 2, 1_700_000_000_000, 7)
    assert sql(spark, kbroker, tmp_path / "state", "--once", "--file", str(EXAMPLE)) == 0
    out = capsys.readouterr().out
    assert "Created query with ID CSAS_PAGEVIEWS_ENRICHED_1" in out
    assert "Created query with ID CTAS_PAGEVIEWS_PER_REGION_2" in out

    expected = g.expected_counts(4, g.views(4, 60, 1_700_000_000_000, 7))
    # hand-checked shape: 4 users in Region_1/2/3, a fifth (User_4) unknown -> region null
    assert {r for r, _ in expected} == {"Region_1", "Region_2", "Region_3", None}
    final: dict[tuple[str | None, int], int] = {}
    for _, k, v in read_committed(kbroker.bootstrap, "PAGEVIEWS_PER_REGION", 2):
        assert k is not None and v is not None
        key = json.loads(k)
        assert key["end"] - key["start"] == 30_000
        val = json.loads(v)
        assert val["window_start"] == key["start"] and val["window_end"] == key["end"]
        final[(key["key"], key["start"])] = val["numviews"]  # the last update of a window wins
    assert final == expected

    enriched = read_committed(kbroker.bootstrap, "PAGEVIEWS_ENRICHED", 2)
    assert len(enriched) == 60
    regions = {"User_0": "Region_1", "User_1": "Region_2", "User_2": "Region_3", "User_3": "Region_1"}
    for _, k, v in enriched:
        assert k is not None and v is not None
        row = json.loads(v)
        assert row["regionid"] == regions.get(k.decode())
        assert "userid" not in row  # the key column is the record key, as in ksqlDB
