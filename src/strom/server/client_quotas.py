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

__all__ = ["ClientQuotaManager", "Rate", "quota_for", "user_name"]

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
