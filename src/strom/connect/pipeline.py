"""A batch of records through a connector's converters and transforms, with its error handling.

Sink order (Kafka's ``WorkerSinkTask``): key converter, value converter, transforms, then the
connector's ``put``. Source order (``WorkerSourceTask``): the connector's record, transforms,
key converter, value converter, then the producer. Pure Python: the Spark queries in
:mod:`strom.connect.runtime` call it on each micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.connect.config import ConnectorConfig
from strom.connect.converters import Converter, make_converter
from strom.connect.data import ConnectRecord
from strom.connect.errors import ErrorHandler, RawRecord
from strom.connect.transforms import UNKNOWN_KEYS, TransformChain


@dataclass
class Produced:
    """A source record ready for Kafka."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int | None


class Pipeline:
    def __init__(self, cfg: ConnectorConfig, task_id: int = 0) -> None:
        self.cfg = cfg
        token = UNKNOWN_KEYS.set([])  # parse_config warned about the unknown keys already
        try:
            self.key_conv: Converter = make_converter(*cfg.key_converter, is_key=True)
            self.value_conv: Converter = make_converter(*cfg.value_converter, is_key=False)
            self.chain: TransformChain = cfg.transform_chain()
        finally:
            UNKNOWN_KEYS.reset(token)
        self.errors = ErrorHandler(cfg, task_id)
        self.filtered = 0

    def _transform(self, rec: ConnectRecord, raw: RawRecord) -> tuple[bool, ConnectRecord | None]:
        try:
            return True, self.chain.apply(rec)
        except Exception as e:
            self.errors.report("TRANSFORMATION", getattr(e, "transform_class", "?"), e, raw)
            return False, None

    def sink_records(self, raws: list[RawRecord]) -> list[tuple[RawRecord, ConnectRecord]]:
        """Kafka records -> Connect records for the sink (failed ones go to the error handler,
        filtered ones are counted)."""
        out: list[tuple[RawRecord, ConnectRecord]] = []
        for raw in raws:
            topic = raw.topic or ""
            try:
                ks, k = self.key_conv.to_connect(topic, raw.key)
            except Exception as e:
                self.errors.report("KEY_CONVERTER", self.key_conv.java_class, e, raw)
                continue
            try:
                vs, v = self.value_conv.to_connect(topic, raw.value)
            except Exception as e:
                self.errors.report("VALUE_CONVERTER", self.value_conv.java_class, e, raw)
                continue
            rec = ConnectRecord(
                topic=topic,
                key=k,
                value=v,
                key_schema=ks,
                value_schema=vs,
                partition=raw.partition,
                timestamp=raw.timestamp,
                headers=list(raw.headers),
                offset=raw.offset,
            )
            ok, res = self._transform(rec, raw)
            if not ok:
                continue
            if res is None:
                self.filtered += 1
                continue
            out.append((raw, res))
        return out

    def source_records(self, recs: list[tuple[ConnectRecord, RawRecord]]) -> list[Produced]:
        """Connect records from a source connector -> Kafka records."""
        out: list[Produced] = []
        for rec, raw in recs:
            ok, res = self._transform(rec, raw)
            if not ok:
                continue
            if res is None:
                self.filtered += 1
                continue
            try:
                key = self.key_conv.from_connect(res.topic, res.key_schema, res.key)
            except Exception as e:
                self.errors.report("KEY_CONVERTER", self.key_conv.java_class, e, raw)
                continue
            try:
                value = self.value_conv.from_connect(res.topic, res.value_schema, res.value)
            except Exception as e:
                self.errors.report("VALUE_CONVERTER", self.value_conv.java_class, e, raw)
                continue
            out.append(Produced(res.topic, res.partition, key, value, list(res.headers), res.timestamp))
        return out
