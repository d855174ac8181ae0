"""Client quota enforcement (bandwidth): Kafka's ``ClientQuotaManager`` for produce and fetch
(KIP-13, KIP-55, KIP-219), sans-IO over an injected time.

Theory of operation
-------------------
The quota of a request's (user, client id) is found in the metadata image's client quotas with
Kafka's precedence (its default quota callback): ``user=U,client-id=C``, ``user=U,client-id=
<default>``, ``user=U``, ``user=<default>,client-id=C``, ``user=<default>,client-id=<default>``,
``user=<default>``, ``client-id=C``, ``client-id=<default>``. The level that matched decides what
shares the quota: a level naming a user (or the default user) counts per user, one naming a
client id per client id, so one quota is shared by every connection of that user/client across
the broker.

Each such key has a rate: bytes recorded in ``quota.window.num`` sample windows of
``quota.window.size.seconds``, measured as Kafka's ``Rate`` does (the sum over the live windows
divided by the time they span, at least ``num - 1`` windows). A request that takes the rate above
the quota is throttled for ``(rate - quota) / quota * span`` ms: the response carries that as
``throttle_time_ms`` and the connection reads no further request for that long (KIP-219), so a
well-behaved client slows down instead of failing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ClientQuotaManager",
    "ConnectionRateQuotas",
    "ControllerMutationQuotaManager",
    "Rate",
    "ThrottlingQuotaExceeded",
    "quota_for",
    "request_throttle_ms",
    "user_name",
]

Entity = tuple[tuple[str, str | None], ...]


def user_name(principal: str) -> str:
    """``User:alice`` -> ``alice`` (the quota entity's user name)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


def quota_for(
    entities: Mapping[Entity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[tuple[str, str], float] | None:
    """The quota (Kafka's precedence) and what shares it, ``(user, client id)`` with "" for a
    part the matched level does not name; None without a quota."""
    U, C = "user", "client-id"
    levels: list[tuple[Entity, tuple[str, str]]] = [
        (((C, client_id), (U, user)), (user, client_id)),
        (((C, None), (U, user)), (user, client_id)),
        (((U, user),), (user, "")),
        (((C, client_id), (U, None)), (user, client_id)),
        (((C, None), (U, None)), (user, client_id)),
        (((U, None),), (user, "")),
        (((C, client_id),), ("", client_id)),
        (((C, None),), ("", client_id)),
    ]
    for entity, shared in levels:
        quotas = entities.get(entity)
        if quotas is not None and key in quotas:
            return shared, float(quotas[key])
    return None


@dataclass
class Rate:
    """Kafka's windowed Rate: samples of ``window_ms``, ``num`` of them kept."""

    num: int
    window_ms: int
    samples: list[list[float]] = field(default_factory=list)  # [window start ms, value]

    def record(self, value: float, now_ms: float) -> None:
        if not self.samples or now_ms >= self.samples[-1][0] + self.window_ms:
            self.samples.append([now_ms, 0.0])
            if len(self.samples) > self.num:
                del self.samples[0]
        self.samples[-1][1] += value

    def _purge(self, now_ms: float) -> None:
        horizon = now_ms - self.num * self.window_ms
        while self.samples and self.samples[0][0] + self.window_ms <= horizon:
            del self.samples[0]

    def span_ms(self, now_ms: float) -> float:
        self._purge(now_ms)
        oldest = self.samples[0][0] if self.samples else now_ms
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def per_second(self, now_ms: float) -> float:
        span = self.span_ms(now_ms)
        return sum(v for _, v in self.samples) / (span / 1000.0)


class ClientQuotaManager:
    """One kind of bandwidth quota (``producer_byte_rate`` or ``consumer_byte_rate``)."""

    def __init__(self, key: str, num_windows: int = 11, window_ms: int = 1000) -> None:
        self.key = key
        self.num = num_windows
        self.window_ms = window_ms
        self.rates: dict[tuple[str, str], Rate] = {}

    def record(
        self,
        entities: Mapping[Entity, Mapping[str, float]],
        principal: str,
        client_id: str,
        value: float,
        now_ms: float,
    ) -> int:
        """Record ``value`` bytes; the throttle time in ms (0 within the quota or without one)."""
        if not entities:
            return 0
        found = quota_for(entities, self.key, user_name(principal), client_id)
        if found is None:
            return 0
        shared, limit = found
        rate = self.rates.get(shared)
        if rate is None:
            rate = self.rates[shared] = Rate(self.num, self.window_ms)
        rate.record(value, now_ms)
        observed = rate.per_second(now_ms)
        if limit <= 0 or observed <= limit:
            return 0
        return round((observed - limit) / limit * rate.span_ms(now_ms))

    def unrecord(
        self,
        principal: str,
        client_id: str,
        value: float,
        now_ms: float,
        entities: Mapping[Entity, Mapping[str, float]],
    ) -> None:
        """Take back a recorded value (a throttled fetch answered empty, as Kafka does)."""
        found = quota_for(entities, self.key, user_name(principal), client_id)
        if found is not None and found[0] in self.rates:
            self.rates[found[0]].record(-value, now_ms)


# ------------------------------------------------------------------ request time (KIP-124)
def request_throttle_ms(
    quotas: ClientQuotaManager,
    entities: Mapping[Entity, Mapping[str, float]],
    principal: str,
    client_id: str,
    elapsed_s: float,
    now_ms: float,
) -> int:
    """``request_percentage``: the time a request took in the broker, recorded as Kafka's
    ClientRequestQuotaManager does (percent of one thread-second), and the throttle time,
    capped at one sample window as Kafka caps it."""
    throttle = quotas.record(entities, principal, client_id, elapsed_s * 100.0, now_ms)
    return min(throttle, quotas.window_ms)


# ------------------------------------------------------------- controller mutations (KIP-599)
class ThrottlingQuotaExceeded(Exception):
    """A strict request went past its ``controller_mutation_rate``; ``throttle_ms`` is how long
    the client should wait."""

    def __init__(self, throttle_ms: int) -> None:
        super().__init__("The throttling quota has been exceeded.")
        self.throttle_ms = throttle_ms


@dataclass
class _Bucket:
    tokens: float
    last_ms: float


class ControllerMutationQuotaManager:
    """``controller_mutation_rate`` (partitions created, added or deleted per second) as Kafka's
    ControllerMutationQuotaManager: a token bucket per quota key (same precedence and sharing as
    the bandwidth quotas) holding at most ``rate * num * window`` tokens, refilled at ``rate``
    per second. A mutation takes its partition count of tokens; the bucket may go negative
    once. A *strict* request (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) is
    refused with THROTTLING_QUOTA_EXCEEDED for each topic met while the bucket is negative;
    older versions are *permissive*: recorded, never refused. Either way the response's
    throttle time is ``-tokens / rate`` seconds (0 while the bucket is not negative)."""

    key = "controller_mutation_rate"

    def __init__(self, num_windows: int = 11, window_ms: int = 1000) -> None:
        self.burst_s = num_windows * window_ms / 1000.0
        self.buckets: dict[tuple[str, str], _Bucket] = {}

    def _bucket(
        self, entities: Mapping[Entity, Mapping[str, float]], principal: str, client_id: str, now_ms: float
    ) -> tuple[_Bucket, float] | None:
        if not entities:
            return None
        found = quota_for(entities, self.key, user_name(principal), client_id)
        if found is None:
            return None
        shared, rate = found
        burst = rate * self.burst_s
        b = self.buckets.get(shared)
        if b is None:
            b = self.buckets[shared] = _Bucket(burst, now_ms)
        b.tokens = min(burst, b.tokens + rate * max(0.0, now_ms - b.last_ms) / 1000.0)
        b.last_ms = now_ms
        return b, rate

    def record(
        self,
        entities: Mapping[Entity, Mapping[str, float]],
        principal: str,
        client_id: str,
        permits: float,
        now_ms: float,
        strict: bool,
    ) -> None:
        """Take ``permits`` tokens; raise :class:`ThrottlingQuotaExceeded` (taking none) when
        ``strict`` and the bucket is already negative."""
        found = self._bucket(entities, principal, client_id, now_ms)
        if found is None:
            return
        b, rate = found
        if strict and b.tokens < 0:
            raise ThrottlingQuotaExceeded(self._throttle(b, rate))
        b.tokens -= permits

    def throttle_ms(
        self, entities: Mapping[Entity, Mapping[str, float]], principal: str, client_id: str, now_ms: float
    ) -> int:
        found = self._bucket(entities, principal, client_id, now_ms)
        return 0 if found is None else self._throttle(*found)

    @staticmethod
    def _throttle(b: _Bucket, rate: float) -> int:
        if b.tokens >= 0 or rate <= 0:
            return 0
        return int(-b.tokens / rate * 1000.0)


# ------------------------------------------------------------- connection creation (KIP-612)
class ConnectionRateQuotas:
    """``connection_creation_rate`` per client IP (entity ``ip``: a named IP's quota, else the
    default IP quota), and the broker-wide ``max.connection.creation.rate`` (per listener:
    ``listener.name.<l>.max.connection.creation.rate``), each measured as a windowed
    :class:`Rate` as Kafka's ConnectionQuotas does. :meth:`record` answers how long the new
    connection must wait: for an IP over its quota Kafka closes the connection after that delay;
    over the broker-wide rate Kafka delays accepting it (strom: delays reading from it)."""

    def __init__(self, num_windows: int = 11, window_ms: int = 1000) -> None:
        self.num = num_windows
        self.window_ms = window_ms
        self.ip_rates: dict[str, Rate] = {}
        self.listener_rates: dict[str, Rate] = {}

    def _throttle(self, rates: dict[str, Rate], key: str, limit: float, now_ms: float) -> int:
        rate = rates.get(key)
        if rate is None:
            rate = rates[key] = Rate(self.num, self.window_ms)
        rate.record(1.0, now_ms)
        observed = rate.per_second(now_ms)
        if limit <= 0 or observed <= limit:
            return 0
        return round((observed - limit) / limit * rate.span_ms(now_ms))

    def record_ip(self, entities: Mapping[Entity, Mapping[str, float]], ip: str, now_ms: float) -> int:
        quotas = entities.get((("ip", ip),)) if entities else None
        if quotas is None or "connection_creation_rate" not in quotas:
            quotas = entities.get((("ip", None),)) if entities else None
        if quotas is None or "connection_creation_rate" not in quotas:
            return 0
        return self._throttle(self.ip_rates, ip, float(quotas["connection_creation_rate"]), now_ms)

    def record_listener(self, listener: str, limit: float, now_ms: float) -> int:
        return self._throttle(self.listener_rates, listener, limit, now_ms)
