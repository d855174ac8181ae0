"""The broker's Prometheus metrics, built at scrape time (``prometheus_client`` custom collector).

Counters come from :class:`~strom.observability.metrics.BrokerMetrics` (bumped as the broker
serves); gauges are read from the broker's state when ``/metrics`` is scraped, so keeping them
costs the hot paths nothing. The README's Observability section maps every name to Kafka's MBean.
Per-partition series (``strom_log_*`` and the consumer-group lag per partition) only with
``strom.metrics.partition.enable``: their cardinality grows with the partitions; the per-topic and
per-group sums are always there.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .metrics import FSYNC_SECONDS, BrokerMetrics, Histogram

if TYPE_CHECKING:
    from ..server.broker import Broker

__all__ = ["StromCollector"]


def _counter(
    name: str, doc: str, labels: list[str], values: dict[tuple[str, ...], int]
) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for key, v in sorted(values.items()):
        fam.add_metric(list(key), v)
    return fam


class StromCollector(Collector):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.per_partition = bool(broker.config["strom.metrics.partition.enable"])

    def collect(self) -> Iterator[Metric]:
        b = self.broker
        m: BrokerMetrics = b.metrics
        yield from self._requests(m)
        yield from self._topics(m)
        yield from self._network(m)
        yield from self._partitions(m)
        yield from self._cluster()
        yield from self._coordinators()
        yield _histogram("strom_log_flush_duration_seconds", "fsync of a log segment's files",
                         [], {(): FSYNC_SECONDS})

    # ------------------------------------------------------------------ requests
    def _requests(self, m: BrokerMetrics) -> Iterator[Metric]:
        yield _counter("strom_requests", "requests answered, by API and version", ["api", "version"],
                       {(api, str(v)): n for (api, v), n in m.requests.items()})
        yield _counter("strom_request_errors", "requests answered with an error, by API and error",
                       ["api", "error"], {k: n for k, n in m.errors.items()})
        yield _histogram("strom_request_duration_seconds",
                         "request total time, from read to answer written (Fetch split into "
                         "FetchConsumer and FetchFollower)", ["request"],
                         {(name,): h for name, h in m.durations.items()})

    def _topics(self, m: BrokerMetrics) -> Iterator[Metric]:
        def per_topic(values: dict[str, int]) -> dict[tuple[str, ...], int]:
            return {(t,): n for t, n in values.items()}

        yield _counter("strom_topic_bytes_in", "bytes appended by producers (leader appends)",
                       ["topic"], per_topic(m.bytes_in))
        yield _counter("strom_topic_records_in", "records appended by producers", ["topic"],
                       per_topic(m.records_in))
        yield _counter("strom_topic_bytes_out", "record bytes sent to consumers", ["topic"],
                       per_topic(m.bytes_out))
        yield _counter("strom_topic_replication_bytes_out", "record bytes sent to follower replicas",
                       ["topic"], per_topic(m.replication_bytes_out))
        yield _counter("strom_topic_failed_produce_requests", "partition appends that failed",
                       ["topic"], per_topic(m.produce_requests_failed))

    # ------------------------------------------------------------------ network
    def _network(self, m: BrokerMetrics) -> Iterator[Metric]:
        b = self.broker
        open_by_listener: Counter[str] = Counter(c.session.listener for c in b.connections)
        listeners = {name for name, _h, _p in b.config.listeners()}
        conns = GaugeMetricFamily("strom_connections", "open client connections", labels=["listener"])
        for name in sorted(listeners | set(open_by_listener)):
            conns.add_metric([name], open_by_listener.get(name, 0))
        yield conns
        yield _counter("strom_connections_created", "connections accepted", ["listener"],
                       {(k,): v for k, v in m.connections_created.items()})
        yield _counter("strom_connections_closed", "connections closed", ["listener"],
                       {(k,): v for k, v in m.connections_closed.items()})
        yield _counter("strom_authentication_failures", "failed SASL authentications", ["listener"],
                       {(k,): v for k, v in m.auth_failures.items()})
        rm = b.replica_manager
        purg = GaugeMetricFamily("strom_purgatory_size", "requests waiting in a purgatory",
                                 labels=["operation"])
        purg.add_metric(["Produce"], rm.produce_purgatory_size())
        purg.add_metric(["Fetch"], rm.purgatory.size())
        yield purg

    # ------------------------------------------------------------------ partitions and logs
    def _partitions(self, m: BrokerMetrics) -> Iterator[Metric]:
        b = self.broker
        rm = b.replica_manager
        cache = b.metadata_cache
        node = b.node_id
        leaders = under_replicated = under_min_isr = 0
        topic_size: defaultdict[str, int] = defaultdict(int)
        per_partition = self.per_partition
        fams = {
            "size": GaugeMetricFamily("strom_log_size_bytes", "bytes of the partition's log",
                                      labels=["topic", "partition"]),
            "segments": GaugeMetricFamily("strom_log_segments", "segments of the partition's log",
                                          labels=["topic", "partition"]),
            "leo": GaugeMetricFamily("strom_log_end_offset", "the partition's log end offset",
                                     labels=["topic", "partition"]),
            "lso": GaugeMetricFamily("strom_log_start_offset", "the partition's log start offset",
                                     labels=["topic", "partition"]),
            "hw": GaugeMetricFamily("strom_log_high_watermark", "the partition's high watermark",
                                    labels=["topic", "partition"]),
        }
        logs = dict(rm.logs)
        for (topic, partition), plog in logs.items():
            size = plog.size_bytes
            topic_size[topic] += size
            if per_partition:
                labels = [topic, str(partition)]
                fams["size"].add_metric(labels, size)
                fams["segments"].add_metric(labels, len(plog.log_segments))
                fams["leo"].add_metric(labels, plog.log_end_offset)
                fams["lso"].add_metric(labels, plog.log_start_offset)
                fams["hw"].add_metric(labels, plog.high_watermark)
            pm = cache.partition(topic, partition)
            if pm is None or pm.leader_id != node:
                continue
            leaders += 1
            if len(pm.isr) < len(pm.replicas):
                under_replicated += 1
            if len(pm.isr) < plog.config.min_insync_replicas:
                under_min_isr += 1
        yield GaugeMetricFamily("strom_partitions", "partitions with a replica on this broker",
                                value=len(logs))
        yield GaugeMetricFamily("strom_leader_partitions", "partitions led by this broker", value=leaders)
        yield GaugeMetricFamily("strom_under_replicated_partitions",
                                "partitions led here whose ISR is smaller than their replicas",
                                value=under_replicated)
        yield GaugeMetricFamily("strom_under_min_isr_partitions",
                                "partitions led here whose ISR is below min.insync.replicas",
                                value=under_min_isr)
        yield CounterMetricFamily("strom_isr_shrinks", "ISR shrinks asked by this leader",
                                  value=m.isr_shrinks)
        yield CounterMetricFamily("strom_isr_expands", "ISR expands asked by this leader",
                                  value=m.isr_expands)
        size_fam = GaugeMetricFamily("strom_topic_log_size_bytes", "bytes of the topic's logs on this broker",
                                     labels=["topic"])
        for topic, size in sorted(topic_size.items()):
            size_fam.add_metric([topic], size)
        yield size_fam
        if per_partition:
            yield from fams.values()

    def _cluster(self) -> Iterator[Metric]:
        b = self.broker
        cache = b.metadata_cache
        offline = total = 0
        topics = 0
        for info in cache.topics():
            topics += 1
            for p in range(info.partitions):
                total += 1
                pm = cache.partition(info.name, p)
                if pm is None or not pm.has_leader:
                    offline += 1
        yield GaugeMetricFamily("strom_cluster_topics", "topics in the cluster (this broker's metadata)",
                                value=topics)
        yield GaugeMetricFamily("strom_cluster_partitions",
                                "partitions in the cluster (this broker's metadata)", value=total)
        yield GaugeMetricFamily("strom_offline_partitions", "partitions without a leader", value=offline)
        q = b.quorum
        if q is None:  # a single node without a quorum is its own controller
            active = 1
        else:
            active = int(q.controller is not None and q.manager is not None and q.manager.is_leader)
        yield GaugeMetricFamily("strom_active_controller", "1 on the active controller", value=active)
        alive = len(cache.alive_brokers())
        yield GaugeMetricFamily("strom_cluster_brokers", "alive brokers (this broker's metadata)",
                                value=alive)
        if q is not None:
            yield GaugeMetricFamily("strom_metadata_last_applied_offset",
                                    "offset of the last metadata log record applied here",
                                    value=q.loader.last_offset)

    # ------------------------------------------------------------------ coordinators
    def _coordinators(self) -> Iterator[Metric]:
        b = self.broker
        gc = b.group_coordinator
        states = GaugeMetricFamily("strom_groups", "consumer groups coordinated here, by type and state",
                                   labels=["type", "state"])
        lag_sum = GaugeMetricFamily("strom_consumer_group_lag_sum",
                                    "sum of the groups' lag over the partitions led here",
                                    labels=["group"])
        lag = GaugeMetricFamily("strom_consumer_group_lag",
                                "high watermark minus committed offset",
                                labels=["group", "topic", "partition"])
        if gc is not None:
            by_state: Counter[tuple[str, str]] = Counter()
            for g in gc.groups.values():
                state = g.state.value if hasattr(g.state, "value") else str(g.state)
                by_state[(g.group_type, state)] += 1
            for (gtype, state), n in sorted(by_state.items()):
                states.add_metric([gtype, state], n)
            logs = b.replica_manager.logs
            node = b.node_id
            cache = b.metadata_cache

            def end_offset(topic: str, partition: int) -> int | None:
                plog = logs.get((topic, partition))
                if plog is None or cache.leader_id(topic, partition) != node:
                    return None
                return plog.high_watermark

            sums: defaultdict[str, int] = defaultdict(int)
            for group, topic, partition, n in gc.lag(end_offset):
                sums[group] += n
                if self.per_partition:
                    lag.add_metric([group, topic, str(partition)], n)
            for group, n in sorted(sums.items()):
                lag_sum.add_metric([group], n)
        yield states
        yield lag_sum
        if self.per_partition:
            yield lag
        txns = GaugeMetricFamily("strom_transactions", "transactional ids coordinated here, by state",
                                 labels=["state"])
        tc = b.txn_coordinator
        if tc is not None:
            by_txn: Counter[str] = Counter(t.state.kafka_name for t in tc.sm.txns.values())
            for state, n in sorted(by_txn.items()):
                txns.add_metric([state], n)
        yield txns


def _histogram(
    name: str, doc: str, labels: list[str], hists: dict[tuple[str, ...], Histogram]
) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=labels)
    for key, h in sorted(hists.items()):
        fam.add_metric(list(key), h.cumulative(), sum_value=h.sum)
    return fam
