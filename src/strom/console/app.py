"""``strom console``: a web UI for any Kafka-compatible cluster, over the Kafka protocol only.

Theory of operation: a Starlette application rendered on the server (Jinja templates; HTMX,
vendored in ``static/``, only boosts links and forms so pages swap without a full reload: every
page also works without JavaScript). Each page asks the cluster through one long-lived
:class:`strom.client.Client` (bootstrap ``--bootstrap-server``, security from
``--command-config``), never through a broker's internals, so it works against Apache Kafka as
well as strom. A cluster that cannot be reached, or answers with an error, gives an error page
that says so (HTTP 502), never a traceback. ``--read-only`` removes every mutating control and
refuses every POST (403). Mutations ask for a confirmation: deleting a topic needs its name typed.

Pages: overview (cluster id, controller, brokers with the partitions each leads, topic and
partition counts, under-replicated and offline partitions); topics (partitions, replication,
messages, size-free: offsets only) with create; a topic (partitions with leader, replicas, ISR,
earliest/latest offsets; configs with their sources; produce; delete); messages (by partition, or
all partitions, and offset or time, newest or oldest first, search with a scan cap); consumer
groups (state, members, lag per partition and total, offset resets, deletes); security; metrics.

A search runs as a background job on the console's event loop (:class:`_SearchJob`): the page
polls its progress fragment (HTMX, every 500 ms) until the answer replaces it; at most
``max_searches`` at once, stopped after ``search_timeout_s`` or on request, cancelled when no page
polled it for ``search_abandon_s``; it yields the loop every SCAN_CHUNK records.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime
import hmac
import json
import logging
import os
import re
import secrets
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..client import admin
from ..client import groups as cgroups
from ..client.client import EARLIEST, LATEST, Client
from ..client.errors import KafkaConnectionError, KafkaError
from ..security.authorizer import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from .sampler import RATE_COUNTERS, MetricsSampler, sparkline

__all__ = ["ConsoleSettings", "build_app", "render_value"]

log = logging.getLogger("strom.console")
HERE = Path(__file__).parent
TOPIC_RESOURCE = 2
OFFSET_OUT_OF_RANGE = 1
MAX_SHOWN_BYTES = 2048  # a value longer than this is cut in the list (its full form is downloadable)
DEFAULT_SCAN_CAP = 10_000
SCAN_CHUNK = 500  # a search yields to the event loop, and checks whether to stop, every this many records
SCAN_FETCH_BYTES = 256 << 10  # a fetch decoded at once (on the broker's loop, when it serves the console)
KEEP_SEARCH_S = 300.0  # a finished search's answer is kept this long (a reload shows it again)
MAX_KEPT_SEARCHES = 64
SECURITY_DISABLED = 54
ACL_RESOURCE_TYPES = ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID")
ACL_OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
                  "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "TWO_PHASE_COMMIT")


@dataclass
class ConsoleSettings:
    bootstrap: str
    read_only: bool = False
    client_factory: Callable[[], Client] | None = None
    basic_auth: dict[str, str] | None = None  # user -> password
    registry: Any = None  # a registry_view.RegistryView: framed keys/values decoded through it
    scan_cap: int = DEFAULT_SCAN_CAP
    metrics_urls: tuple[str, ...] = ()  # brokers' /metrics, sampled for the metrics page
    metrics_interval_s: float = 10.0
    prefix: str = ""  # the path the console is mounted under ("/console" in the broker's listener)
    # discover the brokers' /metrics from the cluster's metadata: (node id, host) -> URL
    metrics_url_for: Callable[[int, str], str] | None = None
    metrics_fetch: Callable[[str], Awaitable[str]] | None = None  # default: an HTTP GET
    max_searches: int = 4  # searches running at once (more are refused with a 503 page)
    search_timeout_s: float = 300.0  # a search stops after this long (its answer says so)
    search_abandon_s: float = 15.0  # a search no page polled for this long is cancelled
    search_wait_s: float = 1.0  # a search done this soon is answered at once (no progress page)
    # a pause every SCAN_CHUNK records of a search: a test hook (STROM_CONSOLE_SCAN_PAUSE_MS) to see progress
    scan_pause_s: float = field(default_factory=lambda: _env_ms("STROM_CONSOLE_SCAN_PAUSE_MS"))


def _env_ms(name: str) -> float:
    try:
        return max(0.0, float(os.environ.get(name, "0") or 0) / 1000)
    except ValueError:
        return 0.0


@dataclass
class _PartPlan:
    """One partition's part of a scan: records [start, end)."""
    partition: int
    start: int
    end: int
    earliest: int
    latest: int
    capped: bool  # a newest-first search that leaves the older records out


@dataclass
class _Plan:
    """One messages page's scan: some partitions' records, kept when ``matcher`` (None: all)
    holds, at most ``want`` of them per partition, at most ``cap`` scanned per partition."""
    topic: str
    parts: list[_PartPlan]
    every: bool  # all partitions
    cap: int
    limit: int
    want: int
    newest_first: bool  # the newest records of the range, shown newest first
    matcher: Callable[[Any], bool] | None
    query: dict[str, str]
    view: dict[str, Any]  # the page's fields known before the scan


@dataclass
class _Progress:
    """A partition's scan so far (read by the progress fragment while the scan runs)."""
    partition: int
    start: int
    end: int
    to_scan: int  # at most this many records (the range, or the scan cap)
    scanned: int = 0
    matches: int = 0
    position: int = 0


@dataclass
class _SearchJob:
    id: str
    plan: _Plan
    progress: list[_Progress]
    started: float  # event loop time
    last_seen: float  # the last time a page asked for it
    task: asyncio.Task[None] | None = None
    result: dict[str, Any] | None = None  # the page's context once done
    error: tuple[int, str, str] | None = None  # (status, title, message)
    finished: float | None = None
    stop: str | None = None  # "stopped": the user asked it to stop

    @property
    def done(self) -> bool:
        return self.finished is not None


class ClusterUnavailable(Exception):
    pass


def render_value(data: bytes | None, limit: int = MAX_SHOWN_BYTES) -> tuple[str, str, bool]:
    """``(kind, text, truncated)``: pretty JSON, UTF-8 text or hex; cut after ``limit`` bytes."""
    if data is None:
        return "null", "", False
    truncated = len(data) > limit
    shown = data[:limit]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", shown.hex(" "), truncated
    try:
        obj = json.loads(text)
    except ValueError:
        return "text", shown.decode("utf-8", errors="replace"), truncated
    if isinstance(obj, dict | list):
        pretty = json.dumps(obj, indent=2, ensure_ascii=False)
        return "json", pretty[:limit], len(pretty) > limit
    return "text", shown.decode("utf-8", errors="replace"), truncated


def build_app(settings: ConsoleSettings) -> Starlette:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.globals["read_only"] = settings.read_only
    templates.env.globals["bootstrap"] = settings.bootstrap
    templates.env.globals["root"] = settings.prefix
    templates.env.filters["when"] = _when
    state: dict[str, Client] = {}
    lock = asyncio.Lock()
    jobs: dict[str, _SearchJob] = {}  # running and recently finished searches, by id

    async def client() -> Client:
        async with lock:
            c = state.get("client")
            if c is None:
                c = settings.client_factory() if settings.client_factory else Client(
                    settings.bootstrap, client_id="strom-console", request_timeout_ms=10_000,
                    connect_timeout_ms=5_000, retries=1)
                state["client"] = c
            return c

    def page(template: str, request: Request, status: int = 200, **ctx: Any) -> Response:
        return templates.TemplateResponse(request, template, {"active": template.split(".")[0], **ctx},
                                          status_code=status)

    def _no_topic(name: str, request: Request) -> Response:
        return page("error.html", request, 404, title="No such topic",
                    message=f"Topic {name!r} does not exist.")

    def guarded(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """Every page: basic auth when configured, read-only refusal of POSTs, and cluster errors
        shown as an error page (502), not a traceback."""
        async def wrapped(request: Request) -> Response:
            if settings.basic_auth is not None and not _authorized(request, settings.basic_auth):
                return Response("authentication required\n", 401,
                                headers={"WWW-Authenticate": 'Basic realm="strom console"'})
            if request.method == "POST" and settings.read_only:
                return page("error.html", request, 403, title="Read-only",
                            message="This console runs with --read-only: nothing can be changed.")
            try:
                return await fn(request)
            except (KafkaConnectionError, OSError, TimeoutError) as e:
                return page("error.html", request, 502, title="Cluster unreachable",
                            message=f"Cannot reach the cluster at {settings.bootstrap}: {e}")
            except KafkaError as e:
                return page("error.html", request, 502, title="The cluster answered with an error",
                            message=str(e))
            except BadInput as e:
                return page("error.html", request, 400, title="Bad input", message=str(e))
            except Exception:
                log.exception("console page %s failed", request.url.path)
                return page("error.html", request, 500, title="Unexpected error",
                            message="The console failed on this page; its log has the details.")
        return wrapped

    # ------------------------------------------------------------------ pages
    async def overview(request: Request) -> Response:
        c = await client()
        md = await c.metadata(None)
        led: dict[int, int] = {}
        under = offline = partitions = 0
        for t in md.topics.values():
            for p in t.partitions.values():
                partitions += 1
                if p.leader < 0:
                    offline += 1
                else:
                    led[p.leader] = led.get(p.leader, 0) + 1
                if len(p.isr) < len(p.replicas):
                    under += 1
        brokers = [
            {"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack or "",
             "controller": b.node_id == md.controller_id, "leads": led.get(b.node_id, 0)}
            for b in sorted(md.brokers.values(), key=lambda b: b.node_id)
        ]
        return page("overview.html", request, cluster_id=md.cluster_id, controller=md.controller_id,
                    brokers=brokers, topics=len(md.topics), partitions=partitions,
                    under_replicated=under, offline=offline)

    async def topics(request: Request) -> Response:
        c = await client()
        if request.method == "POST":
            form = await _form(request)
            name = str(form.get("name", "")).strip()
            parts = _int(form.get("partitions"), "partitions", 1)
            rf = _int(form.get("replication_factor"), "replication factor", 1)
            if not name:
                raise BadInput("a topic needs a name")
            errors = await c.create_topics({name: (parts, rf)})
            if errors.get(name) is not None:
                raise errors[name]  # type: ignore[misc]
            return RedirectResponse(settings.prefix + f"/topics/{name}", 303)
        md = await c.metadata(None)
        show_internal = request.query_params.get("internal") == "1"
        rows = []
        names = sorted(n for n, t in md.topics.items() if show_internal or not t.is_internal)
        ends = await _offsets(c, {n: list(md.topics[n].partitions) for n in names})
        sizes = await _sizes(c, list(md.brokers))
        lag = await _lag_by_topic(c, ends)
        for n in names:
            t = md.topics[n]
            count = sum(max(0, hi - lo) for lo, hi in ends.get(n, {}).values())
            size = sum(v for (tn, _p), v in sizes.items() if tn == n) if sizes is not None else None
            rows.append({"name": n, "partitions": len(t.partitions), "replication": t.replication_factor,
                         "messages": count, "internal": t.is_internal, "size": size,
                         "lag": lag.get(n, {}),
                         "under": sum(1 for p in t.partitions.values() if len(p.isr) < len(p.replicas))})
        return page("topics.html", request, topics=rows, show_internal=show_internal)

    async def topic(request: Request) -> Response:
        c = await client()
        name = request.path_params["name"]
        md = await c.metadata([name])
        t = md.topics.get(name)
        if t is None or t.error_code:
            return _no_topic(name, request)
        ends = (await _offsets(c, {name: list(t.partitions)})).get(name, {})
        parts = [
            {"id": p.partition, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr),
             "earliest": ends.get(p.partition, (-1, -1))[0], "latest": ends.get(p.partition, (-1, -1))[1]}
            for p in sorted(t.partitions.values(), key=lambda p: p.partition)
        ]
        configs = sorted(await admin.describe_configs(c, TOPIC_RESOURCE, name), key=lambda ci: ci.name)
        sizes = await _sizes(c, list(md.brokers) if md.brokers else [])
        size = sum(v for (tn, _p), v in sizes.items() if tn == name) if sizes is not None else None
        return page("topic.html", request, name=name, topic=t, partitions=parts, configs=configs, size=size,
                    messages=sum(max(0, hi - lo) for lo, hi in ends.values()))

    async def delete_topic(request: Request) -> Response:
        c = await client()
        name = request.path_params["name"]
        form = await _form(request)
        if str(form.get("confirm", "")) != name:
            raise BadInput(f"to delete the topic, type its name ({name}) in the confirmation field")
        errors = await c.delete_topics([name])
        if errors.get(name) is not None:
            raise errors[name]  # type: ignore[misc]
        return RedirectResponse(settings.prefix + "/topics", 303)

    async def replay(request: Request) -> Response:
        """Produce one record again (key, value, headers) to a topic, the same or another."""
        c = await client()
        name = request.path_params["name"]
        form = await _form(request)
        partition = _int(form.get("partition") or "0", "partition", 0)
        offset = _int(form.get("offset"), "offset", 0)
        target = form.get("target", "").strip()
        target_partition = _int(form.get("target_partition") or "0", "target partition", 0)
        if not target:
            raise BadInput("name the topic to replay the record to")
        try:
            res = await c.fetch(name, partition, offset, max_wait_ms=0)
            record = next((r for r in res.records if r.offset == offset), None)
        except KafkaError as e:  # (the client raises a partition's error)
            if e.code != OFFSET_OUT_OF_RANGE:
                raise
            record = None
        if record is None:
            raise BadInput(f"{name}-{partition} has no record at offset {offset}")
        again = (record.key, record.value, list(record.headers), -1)
        new = await c.produce(target, target_partition, [again])
        where = f"/topics/{target}/messages?partition={target_partition}&offset={new}&order=oldest"
        return RedirectResponse(settings.prefix + where, 303)

    async def alter_topic(request: Request) -> Response:
        """Set or delete (back to the default) one config, or grow the partition count."""
        c = await client()
        name = request.path_params["name"]
        form = await _form(request)
        if form.get("partitions"):
            count = _int(form["partitions"], "partitions", 1)
            result = await admin.create_partitions(c, {name: count})
            if result.get(name) is not None:
                raise result[name]  # type: ignore[misc]
        else:
            key = form.get("config", "").strip()
            if not key:
                raise BadInput("name the config to set or delete")
            op: tuple[str, int, str | None] = (
                (key, 1, None) if form.get("delete") == "1" else (key, 0, form.get("value", ""))
            )  # DELETE (back to the default) or SET
            await admin.incremental_alter_configs(c, TOPIC_RESOURCE, name, [op])
        return RedirectResponse(settings.prefix + f"/topics/{name}", 303)

    async def produce(request: Request) -> Response:
        c = await client()
        name = request.path_params["name"]
        form = await _form(request)
        partition = _int(form.get("partition") or "0", "partition", 0)
        key = str(form.get("key", ""))
        value = str(form.get("value", ""))
        headers: list[tuple[str, bytes | None]] = []
        for line in str(form.get("headers", "")).splitlines():
            if line.strip():
                k, _, v = line.partition("=")
                headers.append((k.strip(), v.encode()))
        record = (key.encode() if key else None, value.encode(), headers, -1)
        offset = await c.produce(name, partition, [record])
        where = f"/topics/{name}/messages?partition={partition}&offset={offset}&order=oldest"
        return RedirectResponse(settings.prefix + where, 303)

    async def plan_search(c: Client, name: str, q: Any) -> _Plan | None:
        """What a messages page reads: the partitions (one, or ``all``), the offsets to scan in
        each, the filter; None: no such topic."""
        md = await c.metadata([name])
        t = md.topics.get(name)
        if t is None or t.error_code:
            return None
        every = (q.get("partition") or "0") == "all"
        if every:
            partitions = sorted(t.partitions)
            if not partitions:
                raise BadInput(f"topic {name} has no partitions")
        else:
            partition = _int(q.get("partition") or "0", "partition", 0)
            if partition not in t.partitions:
                raise BadInput(f"topic {name} has no partition {partition}")
            partitions = [partition]
        limit = min(_int(q.get("limit") or "50", "limit", 1), 500)
        order = q.get("order", "newest")
        search = q.get("q", "")
        mode = q.get("mode", "text")
        matcher = _matcher(search, mode) if search else None
        los = await c.list_offsets(name, dict.fromkeys(partitions, EARLIEST))
        his = await c.list_offsets(name, dict.fromkeys(partitions, LATEST))
        assert isinstance(los, dict) and isinstance(his, dict)
        from_time = q.get("timestamp", "").strip()
        until = q.get("until", "").strip()
        ends = dict(his)  # each scan stops before this offset
        until_ms = None
        if until:  # a time range's end: records before the first one at or after it
            until_ms = _timestamp(until)
            at_end = await c.list_offsets(name, dict.fromkeys(partitions, until_ms))
            assert isinstance(at_end, dict)
            ends.update({p: o for p, o in at_end.items() if o >= 0})
        if q.get("before"):  # a search continued: older than where it stopped
            before = _int(q.get("before"), "before", 0)
            ends = {p: min(e, before) for p, e in ends.items()}
        from_ms = _timestamp(from_time) if from_time else None
        if from_ms is not None or until_ms is not None:
            inner = matcher

            def in_range(r: Any) -> bool:
                if from_ms is not None and r.timestamp < from_ms:
                    return False
                if until_ms is not None and r.timestamp >= until_ms:
                    return False
                return inner is None or inner(r)
            matcher = in_range
        starts: dict[int, int] = {}
        # each partition's share of the scan cap (all of it when one partition is searched)
        cap = max(1, settings.scan_cap // len(partitions))
        if from_time:  # the first record at or after the time, oldest first from there
            assert from_ms is not None
            at = await c.list_offsets(name, dict.fromkeys(partitions, from_ms))
            assert isinstance(at, dict)
            starts = {p: at[p] if at.get(p, -1) >= 0 else his[p] for p in partitions}
            order = "oldest"
        elif q.get("offset"):
            offset = _int(q.get("offset"), "offset", 0)
            starts = {p: max(los[p], offset) for p in partitions}
        elif order == "newest":
            starts = {p: max(los[p], ends[p] - (cap if search else limit)) for p in partitions}
        else:
            starts = dict(los)
        # oldest first (or from an offset): until `limit` matches; newest first: the newest
        # records (the newest `cap` when searching), reversed after the scan
        from_start = bool(q.get("offset") or from_time)
        newest_first = order == "newest" and not from_start
        parts = [_PartPlan(p, starts[p], ends[p], los[p], his[p],
                           capped=bool(search) and newest_first and starts[p] > los[p]) for p in partitions]
        return _Plan(
            topic=name, parts=parts, every=every, cap=cap, limit=limit, want=10**9 if newest_first else limit,
            newest_first=newest_first, matcher=matcher, query=dict(q.items()),
            view={"name": name, "partitions": sorted(t.partitions),
                  "partition": "all" if every else partitions[0], "order": order, "limit": limit,
                  "search": search, "mode": mode, "from_time": from_time, "until": until,
                  "scan_cap": settings.scan_cap, "part_cap": cap,
                  "earliest": None if every else los[partitions[0]],
                  "latest": None if every else his[partitions[0]]})

    async def messages(request: Request) -> Response:
        """Browse a partition; a search (or a time range, or all partitions) runs as a background
        job whose progress the page polls (its answer shown at once when it is done within
        ``search_wait_s``)."""
        c = await client()
        name = request.path_params["name"]
        plan = await plan_search(c, name, request.query_params)
        if plan is None:
            return _no_topic(name, request)
        progress = [_Progress(pp.partition, pp.start, pp.end, max(0, min(pp.end - pp.start, plan.cap)))
                    for pp in plan.parts]
        if plan.matcher is None and not plan.every:  # plain browsing stops after `limit` records
            ctx = await _scan(c, plan, progress, lambda: None, 0.0, keep_raw=settings.registry is not None)
            await registry_decode(name, ctx)
            return page("messages.html", request, **ctx)
        loop = asyncio.get_running_loop()
        now = loop.time()
        purge_jobs(now)
        running = sum(1 for j in jobs.values() if not j.done)
        if running >= settings.max_searches:
            return page("error.html", request, 503, title="Too many searches",
                        message=f"{running} searches are running (at most {settings.max_searches}); "
                                "try again when one has finished.")
        job = _SearchJob(secrets.token_urlsafe(12), plan, progress, now, now)
        jobs[job.id] = job
        job.task = loop.create_task(run_job(c, job))
        await asyncio.wait({job.task}, timeout=settings.search_wait_s)
        return show_job(request, job, fragment=False)

    async def registry_decode(topic: str, ctx: dict[str, Any]) -> None:
        """Framed keys and values shown decoded through the registry (``--schema-registry-url``)."""
        if settings.registry is not None and ctx.get("rows"):
            await asyncio.to_thread(settings.registry.decode_rows, topic, ctx["rows"], MAX_SHOWN_BYTES)

    async def run_job(c: Client, job: _SearchJob) -> None:
        loop = asyncio.get_running_loop()

        def stop() -> str | None:
            now = loop.time()
            if job.stop:
                return job.stop
            if now - job.started >= settings.search_timeout_s:
                return "timeout"
            if now - job.last_seen >= settings.search_abandon_s:
                return "abandoned"  # no page polls it any more: the browser went away
            return None

        try:
            job.result = await _scan(c, job.plan, job.progress, stop, settings.scan_pause_s,
                                     keep_raw=settings.registry is not None)
            await registry_decode(job.plan.topic, job.result)
            if job.result["stopped"] == "abandoned":
                jobs.pop(job.id, None)
        except asyncio.CancelledError:
            jobs.pop(job.id, None)
            raise
        except (KafkaConnectionError, OSError, TimeoutError) as e:
            job.error = (502, "Cluster unreachable", f"Cannot reach the cluster at {settings.bootstrap}: {e}")
        except KafkaError as e:
            job.error = (502, "The cluster answered with an error", str(e))
        except Exception:
            log.exception("console search of %s failed", job.plan.topic)
            job.error = (500, "Unexpected error", "The search failed; the console's log has the details.")
        finally:
            job.finished = loop.time()

    def purge_jobs(now: float) -> None:
        """Forget finished searches after KEEP_SEARCH_S, and all but the newest MAX_KEPT_SEARCHES."""
        finished = sorted((j for j in jobs.values() if j.finished is not None), key=lambda j: j.started)
        for n, j in enumerate(finished):
            assert j.finished is not None
            if now - j.finished > KEEP_SEARCH_S or n < len(finished) - MAX_KEPT_SEARCHES:
                jobs.pop(j.id, None)

    def show_job(request: Request, job: _SearchJob, fragment: bool) -> Response:
        """The messages page (or, ``fragment``, the part HTMX swaps in) of a search: its progress
        while it runs, its answer once it is done."""
        if job.error is not None:
            status, title, message = job.error
            if fragment:  # (HTMX swaps only 2xx answers)
                return page("_search_error.html", request, title=title, message=message)
            return page("error.html", request, status, title=title, message=message)
        if job.result is not None:
            return page("_results.html" if fragment else "messages.html", request, **job.result)
        elapsed = asyncio.get_running_loop().time() - job.started
        return page("_progress.html" if fragment else "messages.html", request, job=job,
                    elapsed=f"{elapsed:.1f}", **job.plan.view)

    async def search_status(request: Request) -> Response:
        """A search's progress (polled by the page), or its answer; ``stop=1`` stops it where it
        is (its answer then continues from there)."""
        name = request.path_params["name"]
        job = jobs.get(request.path_params["job"])
        fragment = request.query_params.get("fragment") == "1"
        if job is None or job.plan.topic != name:
            message = ("This search is over and forgotten (or no page asked for it for a while, so it "
                       "was stopped); run it again.")
            if fragment:
                return page("_search_error.html", request, title="No such search", message=message)
            return page("error.html", request, 404, title="No such search", message=message)
        job.last_seen = asyncio.get_running_loop().time()
        if request.query_params.get("stop") == "1" and job.task is not None and not job.done:
            job.stop = "stopped"
            await asyncio.wait({job.task}, timeout=30)
        return show_job(request, job, fragment)

    async def download(request: Request) -> Response:
        """One record, a run of records, or a search's matches (``offsets=o,o`` of one partition,
        ``records=p:o,p:o`` across partitions) as JSON lines (values base64 when not UTF-8)."""
        c = await client()
        name = request.path_params["name"]
        qp = request.query_params
        partition = _int(qp.get("partition") or "0", "partition", 0)
        wanted: dict[int, set[int]] | None = None  # a search's matches: these offsets only
        if qp.get("records"):
            wanted = {}
            for item in qp["records"].split(",")[:10_000]:
                part, sep, off = item.partition(":")
                if not sep:
                    raise BadInput(f"records: partition:offset pairs, not {item!r}")
                wanted.setdefault(_int(part, "partition", 0), set()).add(_int(off, "offset", 0))
        elif qp.get("offsets"):
            wanted = {partition: {_int(x, "offsets", 0) for x in qp["offsets"].split(",")[:10_000]}}
        lines: list[str] = []

        async def read(p: int, offset: int, count: int, only: set[int] | None) -> None:
            pos, got = offset, 0
            while got < count:
                res = await c.fetch(name, p, pos, max_wait_ms=0)
                if res.error_code:
                    raise KafkaError(res.error_code, f"fetching {name}-{p} at {pos}")
                for r in res.records:
                    if (only is not None and r.offset not in only) or got >= count:
                        continue
                    got += 1
                    lines.append(json.dumps({
                        "partition": p, "offset": r.offset, "timestamp": r.timestamp,
                        "key": _jsonable(r.key), "value": _jsonable(r.value),
                        "headers": [[h, _jsonable(v)] for h, v in r.headers]}))
                if res.next_offset is None or res.next_offset <= pos:
                    break
                pos = res.next_offset
                if only is not None and pos > max(only):
                    break

        if wanted is None:
            offset = _int(qp.get("offset") or "0", "offset", 0)
            await read(partition, offset, min(_int(qp.get("count") or "1", "count", 1), 10_000), None)
            filename = f"{name}-{partition}-{offset}.jsonl"
        else:
            for p, offsets in sorted(wanted.items()):
                await read(p, min(offsets), len(offsets), offsets)
            filename = f"{name}-matches.jsonl"
        return Response("\n".join(lines) + "\n", media_type="application/x-ndjson", headers={
            "Content-Disposition": f'attachment; filename="{filename}"'})

    async def tail(request: Request) -> Response:
        """Live tail (server-sent events): each record appended to the partition from now on, as a
        JSON event; ends when the browser goes away (or after an hour)."""
        c = await client()
        name = request.path_params["name"]
        partition = _int(request.query_params.get("partition") or "0", "partition", 0)
        start = await c.list_offsets(name, partition, LATEST)
        assert isinstance(start, int)

        async def events() -> AsyncIterator[str]:
            pos = start
            yield f"event: ready\ndata: {json.dumps({'offset': pos})}\n\n"
            deadline = asyncio.get_running_loop().time() + 3600
            while asyncio.get_running_loop().time() < deadline and not await request.is_disconnected():
                res = await c.fetch(name, partition, pos, max_wait_ms=1000)
                if res.error_code:
                    yield f"event: error\ndata: {json.dumps({'error': res.error_code})}\n\n"
                    return
                for r in res.records:
                    _, key, _ = render_value(r.key, 256)
                    kind, value, cut = render_value(r.value)
                    if settings.registry is not None:
                        row: dict[str, Any] = {"key": key, "key_kind": "", "value": value, "value_kind": kind,
                                               "truncated": cut, "_raw": (r.key, r.value)}
                        await asyncio.to_thread(settings.registry.decode_rows, name, [row], MAX_SHOWN_BYTES)
                        key, kind, value, cut = row["key"], row["value_kind"], row["value"], row["truncated"]
                    yield "data: " + json.dumps({"offset": r.offset, "timestamp": r.timestamp, "key": key,
                                                 "value": value, "kind": kind, "truncated": cut}) + "\n\n"
                if res.next_offset is not None and res.next_offset > pos:
                    pos = res.next_offset

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def group_list(request: Request) -> Response:
        c = await client()
        listed = await cgroups.list_groups(c)
        return page("groups.html", request, groups=listed)

    async def group(request: Request) -> Response:
        c = await client()
        gid = request.path_params["group"]
        desc = await cgroups.describe_group(c, gid)
        committed = await cgroups.fetch_offsets(c, gid)
        by_topic: dict[str, list[int]] = {}
        for topic_name, p in committed:
            by_topic.setdefault(topic_name, []).append(p)
        ends = await _offsets(c, by_topic)
        owner = {tp: m.member_id for m in desc.members for tp in m.partitions}
        rows: list[dict[str, Any]] = []
        for (topic_name, p), om in sorted(committed.items()):
            end = ends.get(topic_name, {}).get(p, (-1, -1))[1]
            rows.append({"topic": topic_name, "partition": p, "committed": om.offset, "end": end,
                         "lag": max(0, end - om.offset) if end >= 0 and om.offset >= 0 else None,
                         "member": owner.get((topic_name, p), "")})
        total = sum(r["lag"] or 0 for r in rows)
        return page("group.html", request, group=desc, rows=rows, total_lag=total)

    async def reset_group(request: Request) -> Response:
        """Reset a group's committed offsets: a preview first (current -> new per partition),
        then, from the preview's Execute button, the commit (refused by the coordinator while the
        group has active members, as kafka-consumer-groups --reset-offsets)."""
        c = await client()
        gid = request.path_params["group"]
        form = await _form(request)
        strategy = form.get("strategy", "")
        topic_filter = form.get("topic", "").strip()
        raw = form.get("value", "").strip()
        committed = await cgroups.fetch_offsets(c, gid)
        tps = sorted(tp for tp in committed if not topic_filter or tp[0] == topic_filter)
        if not tps:
            on = f" on {topic_filter}" if topic_filter else ""
            raise BadInput(f"group {gid} has no committed offsets{on}")
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        ends = await _offsets(c, by_topic)

        def bounds(tp: tuple[str, int]) -> tuple[int, int]:
            return ends.get(tp[0], {}).get(tp[1], (0, 0))

        target: dict[tuple[str, int], int] = {}
        if strategy == "earliest":
            target = {tp: bounds(tp)[0] for tp in tps}
        elif strategy == "latest":
            target = {tp: bounds(tp)[1] for tp in tps}
        elif strategy in ("offset", "shift"):
            try:
                n = int(raw)
            except ValueError:
                raise BadInput(f"{strategy} needs a whole number, not {raw!r}") from None
            for tp in tps:
                lo, hi = bounds(tp)
                want = n if strategy == "offset" else committed[tp].offset + n
                target[tp] = min(max(want, lo), hi)  # Kafka's checkOffsetsRange
        elif strategy == "timestamp":
            ts = _timestamp(raw)
            for t, ps in by_topic.items():
                found = await c.list_offsets(t, dict.fromkeys(ps, ts))
                assert isinstance(found, dict)
                for p in ps:
                    target[(t, p)] = found[p] if found.get(p, -1) >= 0 else bounds((t, p))[1]
        else:
            raise BadInput("choose a reset: earliest, latest, offset, shift or timestamp")
        rows = [{"topic": t, "partition": p, "current": committed[(t, p)].offset, "new": target[(t, p)]}
                for t, p in tps]
        executed = form.get("execute") == "1"
        errors: dict[str, str] = {}
        if executed:
            result = await cgroups.commit_offsets(c, gid, target)
            errors = {f"{t}-{p}": str(e) for (t, p), e in result.items() if e is not None}
        desc = await cgroups.describe_group(c, gid)
        return page("reset.html", request, group=desc, rows=rows, executed=executed, errors=errors,
                    form=form)

    async def delete_group(request: Request) -> Response:
        c = await client()
        gid = request.path_params["group"]
        form = await _form(request)
        if form.get("confirm", "") != gid:
            raise BadInput(f"to delete the group, type its id ({gid}) in the confirmation field")
        result = await cgroups.delete_groups(c, [gid])
        if result.get(gid) is not None:
            raise result[gid]  # type: ignore[misc]
        return RedirectResponse(settings.prefix + "/groups", 303)

    async def delete_group_offsets(request: Request) -> Response:
        """Delete a group's committed offsets of one topic (OffsetDelete; the topic's name typed)."""
        c = await client()
        gid = request.path_params["group"]
        form = await _form(request)
        topic_name = form.get("topic", "").strip()
        if not topic_name:
            raise BadInput("choose the topic whose committed offsets to delete")
        if form.get("confirm", "") != topic_name:
            raise BadInput(f"to delete the group's offsets of {topic_name}, type the topic name in the "
                           "confirmation field")
        committed = await cgroups.fetch_offsets(c, gid)
        tps = [tp for tp in committed if tp[0] == topic_name]
        if not tps:
            raise BadInput(f"group {gid} has no committed offsets on {topic_name}")
        error, result = await cgroups.delete_offsets(c, gid, tps)
        if error is not None:
            raise error
        failed = [(f"{t}-{p}", e) for (t, p), e in result.items() if e is not None]
        if failed:
            why = "; ".join(f"{tp}: {e}" for tp, e in failed)
            raise KafkaError(failed[0][1].code, f"offsets not deleted: {why}")
        return RedirectResponse(settings.prefix + f"/groups/{urllib.parse.quote(gid)}", 303)

    async def security(request: Request) -> Response:
        """SCRAM users (DescribeUserScramCredentials); add or replace a credential, delete one."""
        c = await client()
        if request.method == "POST":
            form = await _form(request)
            user = form.get("user", "").strip()
            mechanism = form.get("mechanism", "SCRAM-SHA-256")
            if not user:
                raise BadInput("name the user")
            if mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                raise BadInput("mechanism: SCRAM-SHA-256 or SCRAM-SHA-512")
            if form.get("delete") == "1":
                if form.get("confirm", "") != user:
                    raise BadInput(f"to delete the credential, type the user name ({user})")
                result = await admin.alter_user_scram_credentials(c, deletions=[(user, mechanism)])
            else:
                password = form.get("password", "")
                if not password:
                    raise BadInput("a SCRAM credential needs a password")
                iterations = _int(form.get("iterations") or "4096", "iterations", 4096)
                result = await admin.alter_user_scram_credentials(
                    c, upsertions=[(user, mechanism, password, iterations)])
            if result.get(user) is not None:
                raise result[user]  # type: ignore[misc]
            return RedirectResponse(settings.prefix + "/security", 303)
        described = await admin.describe_user_scram_credentials(c)
        users = [{"user": u, "credentials": v if not isinstance(v, KafkaError) else [], "error":
                  str(v) if isinstance(v, KafkaError) else None} for u, v in sorted(described.items())]
        acls: list[dict[str, Any]] = []
        acl_error = None
        try:
            every = (int(ResourceType.ANY), None, int(PatternType.ANY), None, None, int(AclOperation.ANY),
                     int(AclPermissionType.ANY))
            found = await admin.describe_acls(c, every)
            acls = [_acl_row(b) for b in sorted(found, key=lambda b: (b[0], b[1], b[3], b[5]))]
        except KafkaError as e:
            acl_error = ("the cluster has no authorizer (authorizer.class.name is not set): no ACLs apply"
                         if e.code == SECURITY_DISABLED else str(e))
        return page("security.html", request, users=users, acls=acls, acl_error=acl_error,
                    resource_types=ACL_RESOURCE_TYPES, operations=ACL_OPERATIONS)

    async def acl_change(request: Request) -> Response:
        """Create or delete one ACL binding: the first POST shows the binding for a confirmation,
        the confirmed one (``confirm=1``) carries it out."""
        c = await client()
        form = await _form(request)
        action = form.get("action", "")
        if action not in ("create", "delete"):
            raise BadInput("action: create or delete")
        binding = _acl_binding(form)
        if form.get("confirm") != "1":
            return page("acl_confirm.html", request, action=action, acl=_acl_row(binding), form=form)
        if action == "create":
            errors = await admin.create_acls(c, [binding])
            if errors and errors[0] is not None:
                raise errors[0]
        else:
            rt, name, pt, principal, host, op, perm = binding
            result = await admin.delete_acls(c, [(rt, name, pt, principal, host, op, perm)])
            if result and isinstance(result[0], KafkaError):
                raise result[0]
            if not result or not result[0]:
                raise BadInput("no such ACL (already deleted?)")
        return RedirectResponse(settings.prefix + "/security", 303)

    async def discover() -> list[str]:
        assert settings.metrics_url_for is not None
        md = await (await client()).metadata([])
        return [settings.metrics_url_for(b.node_id, b.host) for b in sorted(md.brokers.values(),
                                                                           key=lambda b: b.node_id)]

    sampler = MetricsSampler(list(settings.metrics_urls), settings.metrics_interval_s,
                             discover=discover if settings.metrics_url_for is not None else None,
                             fetch=settings.metrics_fetch)

    async def metrics_page(request: Request) -> Response:
        charts = []
        for series in sampler.series:
            rows = []
            for label, counter in RATE_COUNTERS.items():
                values = series.rates(counter)
                rows.append({"label": label, "svg": sparkline(values),
                             "now": f"{values[-1]:.1f}" if values else "-"})
            charts.append({"url": series.url, "error": series.error, "rows": rows})
        lags = [{"group": g, "svg": sparkline(v), "now": f"{v[-1]:.0f}" if v else "-"}
                for g, v in sorted(sampler.lag_by_group().items())]
        return page("metrics.html", request, charts=charts, lags=lags, interval=settings.metrics_interval_s,
                    enabled=sampler.enabled, discover_error=sampler.discover_error)

    routes = [
        Route("/", guarded(overview)),
        Route("/topics", guarded(topics), methods=["GET", "POST"]),
        Route("/topics/{name}", guarded(topic)),
        Route("/topics/{name}/delete", guarded(delete_topic), methods=["POST"]),
        Route("/topics/{name}/produce", guarded(produce), methods=["POST"]),
        Route("/topics/{name}/alter", guarded(alter_topic), methods=["POST"]),
        Route("/topics/{name}/replay", guarded(replay), methods=["POST"]),
        Route("/topics/{name}/messages", guarded(messages)),
        Route("/topics/{name}/search/{job}", guarded(search_status)),
        Route("/topics/{name}/download", guarded(download)),
        Route("/topics/{name}/tail", guarded(tail)),
        Route("/groups", guarded(group_list)),
        Route("/metrics", guarded(metrics_page)),
        Route("/security", guarded(security), methods=["GET", "POST"]),
        Route("/security/acls", guarded(acl_change), methods=["POST"]),
        Route("/groups/{group}", guarded(group)),
        Route("/groups/{group}/reset", guarded(reset_group), methods=["POST"]),
        Route("/groups/{group}/delete", guarded(delete_group), methods=["POST"]),
        Route("/groups/{group}/delete-offsets", guarded(delete_group_offsets), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        yield
        await sampler.stop()
        for job in list(jobs.values()):
            if job.task is not None and not job.task.done():
                job.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await job.task
        c = state.pop("client", None)
        if c is not None:
            await c.close()

    return Starlette(routes=routes, lifespan=lifespan)


class BadInput(Exception):
    pass


SCAN_PARALLEL = 4  # partitions of an all-partitions search scanned at once


@dataclass
class _PartScan:
    """One partition's scan result."""
    found: list[Any]
    scanned: int = 0
    capped: bool = False
    reason: str | None = None
    stopped_at: int | None = None
    last_scanned: int | None = None


async def _scan_partition(c: Client, plan: _Plan, pp: _PartPlan, progress: _Progress,
                          stop: Callable[[], str | None], pause_s: float) -> _PartScan:
    """Read one partition's records [start, end), keep the matching ones; at most ``plan.cap``
    records. Every SCAN_CHUNK records it yields to the event loop (the broker's own, when the
    broker serves the console) and asks ``stop`` whether to stop there (a reason: "stopped",
    "timeout", ...)."""
    out = _PartScan([], capped=pp.capped)
    found = out.found
    pos = pp.start
    progress.position = pos
    done = False
    while pos < pp.end and not done and len(found) < plan.want:
        res = await c.fetch(plan.topic, pp.partition, pos, max_wait_ms=0, max_bytes=SCAN_FETCH_BYTES)
        if res.error_code:
            raise KafkaError(res.error_code, f"fetching {plan.topic}-{pp.partition} at {pos}")
        for r in res.records:
            if r.offset >= pp.end or len(found) >= plan.want:
                done = True
                break
            if out.scanned >= plan.cap:  # more to read, but the cap is reached
                out.capped = done = True
                out.stopped_at = r.offset
                break
            if out.scanned and out.scanned % SCAN_CHUNK == 0:
                progress.position = r.offset
                await asyncio.sleep(pause_s)
                out.reason = stop()
                if out.reason is not None:
                    done = True
                    out.stopped_at = r.offset
                    break
            out.scanned += 1
            progress.scanned = out.scanned
            out.last_scanned = r.offset
            if plan.matcher is None or plan.matcher(r):
                found.append((pp.partition, r))
                progress.matches = len(found)
        nxt = res.next_offset
        if nxt is None or nxt <= pos:
            break
        pos = nxt
        if not done:
            progress.position = pos
    return out


async def _scan(c: Client, plan: _Plan, progress: list[_Progress], stop: Callable[[], str | None],
                pause_s: float, keep_raw: bool = False) -> dict[str, Any]:
    """Scan the plan's partitions (SCAN_PARALLEL at once); returns the messages page's context:
    the rows (newest or oldest first; across partitions by timestamp) and, per partition, what
    was scanned and the query that continues a capped or stopped scan."""
    gate = asyncio.Semaphore(SCAN_PARALLEL)

    async def one(pp: _PartPlan, prog: _Progress) -> _PartScan:
        async with gate:
            return await _scan_partition(c, plan, pp, prog, stop, pause_s)

    results = await asyncio.gather(*(one(pp, prog) for pp, prog in zip(plan.parts, progress, strict=True)))
    q = plan.query
    summaries: list[dict[str, Any]] = []
    for pp, res in zip(plan.parts, results, strict=True):
        resume = None
        if res.capped or res.reason is not None:
            keep = {k: v for k, v in q.items() if k not in ("offset", "before", "timestamp")}
            keep["partition"] = str(pp.partition)  # (an all-partitions search goes on per partition)
            if res.stopped_at is not None:  # on from the first record not scanned, up to the same end
                resume = keep | {"offset": str(res.stopped_at), "order": "oldest"}
                if q.get("before") or plan.newest_first:
                    resume["before"] = str(pp.end)
            else:  # newest first: the records older than the scanned ones
                resume = keep | {"before": str(pp.start)}
        summaries.append({
            "partition": pp.partition, "earliest": pp.earliest, "latest": pp.latest, "scanned": res.scanned,
            "scanned_from": pp.start if res.scanned else None, "scanned_to": res.last_scanned,
            "capped": res.capped and res.reason is None, "stopped": res.reason, "stopped_at": res.stopped_at,
            "resume": urllib.parse.urlencode(resume) if resume else None})
    found = [f for res in results for f in res.found]
    if plan.every:  # across partitions: by time
        found.sort(key=lambda pr: (pr[1].timestamp, pr[0], pr[1].offset), reverse=plan.newest_first)
    elif plan.newest_first:
        found.reverse()
    rows = []
    for partition, r in found[:plan.limit]:
        kkind, ktext, _ = render_value(r.key, 256)
        vkind, vtext, cut = render_value(r.value)
        rows.append({"partition": partition, "offset": r.offset, "timestamp": r.timestamp, "key": ktext,
                     "key_kind": kkind, "value": vtext, "value_kind": vkind, "truncated": cut,
                     "size": len(r.value) if r.value is not None else 0,
                     "headers": [(h, (v or b"").decode("utf-8", errors="replace")) for h, v in r.headers]})
        if keep_raw:  # for the registry view (decoded in a worker thread, then dropped)
            rows[-1]["_raw"] = (r.key, r.value)
    one_part = summaries[0]
    return plan.view | {
        "rows": rows, "scans": summaries, "scanned": sum(s["scanned"] for s in summaries),
        "capped": any(s["capped"] for s in summaries), "stopped": next((s["stopped"] for s in summaries
                                                                        if s["stopped"]), None),
        "stopped_at": one_part["stopped_at"], "scanned_from": one_part["scanned_from"],
        "scanned_to": one_part["scanned_to"], "resume": one_part["resume"]}


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form body (the console's forms are all urlencoded: no multipart parser)."""
    body = await request.body()
    if len(body) > 10 << 20:
        raise BadInput("form too large")
    try:
        pairs = urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError:
        raise BadInput("form is not UTF-8") from None
    return dict(pairs)


def _int(raw: object, what: str, minimum: int) -> int:
    try:
        v = int(str(raw).strip())
    except (TypeError, ValueError):
        raise BadInput(f"{what} must be a whole number, not {raw!r}") from None
    if v < minimum:
        raise BadInput(f"{what} must be at least {minimum}")
    return v


def _matcher(search: str, mode: str) -> Callable[[Any], bool]:
    """A record filter: ``text`` (substring of key, value, header names or values), ``key``
    (substring of the key), ``regex``
    (over key, value and header values decoded as UTF-8), ``json`` (``a.b.0.c=value``: the
    value is JSON and the path holds that value, compared as text; ``a.b`` alone: the path
    exists; JSONPath's ``$.a.b[0].c`` and ``$['a']`` are read too), ``header`` (``name`` or
    ``name=value``)."""
    if mode == "text":
        needle = search.encode()

        def text(r: Any) -> bool:
            if (r.key is not None and needle in r.key) or (r.value is not None and needle in r.value):
                return True
            return any(bool(needle in (v or b"") or search in h) for h, v in r.headers)
        return text
    if mode == "key":
        want_key = search.encode()
        return lambda r: r.key is not None and want_key in r.key
    if mode == "regex":
        try:
            pattern = re.compile(search)
        except re.error as e:
            raise BadInput(f"regular expression {search!r}: {e}") from None

        def rx(r: Any) -> bool:
            parts = [r.key, r.value, *(v for _h, v in r.headers)]
            return any(p is not None and pattern.search(p.decode("utf-8", "replace")) for p in parts)
        return rx
    if mode == "json":
        path, has_value, want = search.partition("=")
        path = path.strip()
        if path.startswith("$"):  # JSONPath's spelling: $.a.b[0].c, $['a']
            path = path[1:]
        path = re.sub(r"\[\s*(\d+|'[^']*'|\"[^\"]*\")\s*\]", lambda m: "." + m.group(1).strip("'\""), path)
        steps = [s for s in path.split(".") if s]
        if not steps:
            raise BadInput("JSON path search: give a.b.c or a.b.c=value")

        def js(r: Any) -> bool:
            try:
                node: Any = json.loads(r.value) if r.value is not None else None
            except ValueError:
                return False
            for step in steps:
                if isinstance(node, dict) and step in node:
                    node = node[step]
                elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
                    node = node[int(step)]
                else:
                    return False
            if not has_value:
                return True
            shown = node if isinstance(node, str) else json.dumps(node)
            return bool(shown == want.strip())
        return js
    if mode == "header":
        name, has_value, want = search.partition("=")

        def hd(r: Any) -> bool:
            return any(h == name and (not has_value or (v or b"").decode("utf-8", "replace") == want)
                       for h, v in r.headers)
        return hd
    raise BadInput(f"unknown search mode {mode!r}: text, key, regex, json or header")


def _acl_binding(form: dict[str, str]) -> admin.AclTuple:
    """One ACL binding from a form (names as kafka-acls.sh and Kafka's enums spell them)."""
    def pick(key: str, cls: Any, allowed: tuple[str, ...]) -> int:
        raw = form.get(key, "").strip().upper().replace("-", "_").replace(" ", "_")
        if raw not in allowed:
            raise BadInput(f"{key}: one of {', '.join(allowed)}, not {form.get(key, '')!r}")
        return int(cls[raw])

    rt = pick("resource_type", ResourceType, ACL_RESOURCE_TYPES)
    pt = pick("pattern_type", PatternType, ("LITERAL", "PREFIXED"))
    op = pick("operation", AclOperation, ACL_OPERATIONS)
    perm = pick("permission", AclPermissionType, ("ALLOW", "DENY"))
    name = form.get("resource_name", "").strip()
    if rt == ResourceType.CLUSTER:
        name = CLUSTER_NAME
    if not name:
        raise BadInput("name the resource (a topic, group or transactional id; * for all)")
    principal = form.get("principal", "").strip()
    kind, sep, who = principal.partition(":")
    if not sep or not kind or not who:
        raise BadInput(f"principal: type:name, e.g. User:alice or User:* (not {principal!r})")
    host = form.get("host", "").strip() or "*"
    return rt, name, pt, principal, host, op, perm


def _acl_row(b: admin.AclTuple) -> dict[str, Any]:
    rt, name, pt, principal, host, op, perm = b

    def named(cls: Any, v: int) -> str:
        try:
            return str(cls(v).name)
        except ValueError:
            return str(v)
    return {"resource_type": named(ResourceType, rt), "resource_name": name,
            "pattern_type": named(PatternType, pt), "principal": principal, "host": host,
            "operation": named(AclOperation, op), "permission": named(AclPermissionType, perm)}


def _jsonable(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


async def _offsets(c: Client, partitions: dict[str, list[int]]) -> dict[str, dict[int, tuple[int, int]]]:
    """``{topic: {partition: (earliest, latest)}}``; partitions whose leader does not answer are left out."""
    out: dict[str, dict[int, tuple[int, int]]] = {}

    async def one(topic_name: str, parts: list[int]) -> None:
        if not parts:
            return
        try:
            lo = await c.list_offsets(topic_name, dict.fromkeys(parts, EARLIEST))
            hi = await c.list_offsets(topic_name, dict.fromkeys(parts, LATEST))
        except KafkaError:
            return
        assert isinstance(lo, dict) and isinstance(hi, dict)
        out[topic_name] = {p: (lo[p], hi[p]) for p in parts if p in lo and p in hi}

    await asyncio.gather(*(one(t, ps) for t, ps in partitions.items()))
    return out


MAX_GROUPS_FOR_LAG = 200  # the topics page asks each group's offsets: at most this many groups


async def _lag_by_topic(
    c: Client, ends: dict[str, dict[int, tuple[int, int]]]
) -> dict[str, dict[str, int]]:
    """``{topic: {group: lag}}``: the lag of every group with committed offsets on the topic
    (log end - committed, summed over its partitions)."""
    try:
        listed = (await cgroups.list_groups(c))[:MAX_GROUPS_FOR_LAG]
    except (KafkaError, OSError, TimeoutError):
        return {}

    async def offsets(gid: str) -> dict[tuple[str, int], Any]:
        try:
            return await cgroups.fetch_offsets(c, gid)
        except (KafkaError, OSError, TimeoutError):
            return {}

    answers = await asyncio.gather(*(offsets(g.group_id) for g in listed))
    out: dict[str, dict[str, int]] = {}
    for g, committed in zip(listed, answers, strict=True):
        for (topic_name, p), om in committed.items():
            end = ends.get(topic_name, {}).get(p)
            if end is not None and om.offset >= 0:
                per = out.setdefault(topic_name, {})
                per[g.group_id] = per.get(g.group_id, 0) + max(0, end[1] - om.offset)
    return out


async def _sizes(c: Client, brokers: list[int]) -> dict[tuple[str, int], int] | None:
    """Bytes per partition summed over every replica (DescribeLogDirs on each broker); None if a
    broker did not answer (the sizes would be partial)."""
    out: dict[tuple[str, int], int] = {}
    try:
        answers = await asyncio.gather(*(admin.describe_log_dirs(c, b) for b in brokers))
    except (KafkaError, OSError, TimeoutError):
        return None
    for dirs in answers:
        for _dir, error, sizes in dirs:
            if error == 0:
                for tp, n in sizes.items():
                    out[tp] = out.get(tp, 0) + n
    return out


def _when(ms: int) -> str:
    """A record timestamp as UTC ISO time (-1: none)."""
    if ms < 0:
        return "-"
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
        return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO date-time (UTC unless it names a zone)."""
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(f"timestamp {text!r}: give milliseconds or yyyy-MM-ddTHH:mm:ss[Z|+hh:mm]") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return int(dt.timestamp() * 1000)


def _authorized(request: Request, users: dict[str, str]) -> bool:
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("basic "):
        return False
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    want = users.get(user)
    return want is not None and hmac.compare_digest(want, password)


def load_basic_auth(path: str) -> dict[str, str]:
    """``user:password`` lines (``#`` comments) -> users. Raises ValueError with the reason."""
    users = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user:
            raise ValueError(f"{path}:{n}: expected user:password")
        users[user] = password
    if not users:
        raise ValueError(f"{path}: no user:password line")
    return users


