"""``strom serve`` loads every API version's codec before it serves
(``strom.protocol.preload.schemas``, on by default); the test harness turns it off."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")


def _loaded(broker: BrokerProcess) -> list[str]:
    return re.findall(r"loaded the codecs of (\d+) API versions", broker.log_path.read_text(errors="replace"))


def test_serve_preloads_codecs_by_default(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "on", preload_schemas=True) as b:
        (n,) = _loaded(b)
        assert int(n) > 200
        p = ck.Producer({"bootstrap.servers": b.bootstrap})
        errors: list[object] = []
        p.produce("preloaded", b"v", on_delivery=lambda err, _m: errors.append(err))
        assert p.flush(30) == 0 and errors == [None]
    with BrokerProcess(tmp_path / "off") as b:
        assert _loaded(b) == []
