"""Kafka Connect's REST API for ``strom connect serve``: the connectors of one worker, each a
Spark query in this process.

``GET /`` (version), ``GET /connector-plugins``, ``GET /connectors`` (``?expand=status|info``),
``POST /connectors`` (201; 409 when the name is taken), ``GET /connectors/{n}``,
``GET|PUT /connectors/{n}/config`` (PUT creates (201) or reconfigures and restarts (200)),
``GET /connectors/{n}/status``, ``GET /connectors/{n}/tasks``, ``PUT /connectors/{n}/pause``
and ``/resume`` (202), ``POST /connectors/{n}/restart`` (204), ``DELETE /connectors/{n}`` (204).
Errors are Connect's ``{"error_code", "message"}`` (400 bad config, 404 unknown connector, 409
conflict). Configs are kept in ``<state-dir>/connectors.json`` (Connect keeps them in its
``connect-configs`` topic) and started again with the worker.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from strom.connect.config import CONNECTORS, ConnectorConfig, parse_config
from strom.connect.data import ConfigError
from strom.connect.runtime import ConnectorRun

log = logging.getLogger("strom.connect")


def _err(code: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": code, "message": message}, status_code=code)


class Worker:
    """The connectors of this worker: configs, their runs, pause state."""

    def __init__(self, spark: Any, bootstrap: str, state_dir: Path) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.state_dir = state_dir
        self.lock = threading.RLock()
        self.configs: dict[str, ConnectorConfig] = {}
        self.runs: dict[str, ConnectorRun] = {}
        self.paused: set[str] = set()
        self.failures: dict[str, str] = {}
        state_dir.mkdir(parents=True, exist_ok=True)

    @property
    def store(self) -> Path:
        return self.state_dir / "connectors.json"

    def load(self) -> None:
        if not self.store.exists():
            return
        doc = json.loads(self.store.read_text())
        for name, entry in doc.items():
            try:
                cfg = parse_config(entry["config"], name=name)
            except ConfigError as e:
                log.error("stored connector %s has a bad config, not started: %s", name, e)
                continue
            self.configs[name] = cfg
            if entry.get("paused"):
                self.paused.add(name)
            else:
                self._start(name)

    def _save(self) -> None:
        doc = {n: {"config": c.props, "paused": n in self.paused} for n, c in self.configs.items()}
        tmp = self.store.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2))
        os.replace(tmp, self.store)

    def _start(self, name: str) -> None:
        cfg = self.configs[name]
        run = ConnectorRun(cfg, self.bootstrap, self.state_dir / name)
        self.runs[name] = run
        self.failures.pop(name, None)
        try:
            run.start(self.spark)
        except Exception as e:  # the connector fails, the worker goes on
            log.error("connector %s failed to start: %s", name, e)
            self.failures[name] = f"{type(e).__name__}: {e}"

    def _stop(self, name: str) -> None:
        run = self.runs.pop(name, None)
        if run is not None:
            run.stop()

    def put(self, cfg: ConnectorConfig) -> bool:
        """Creates or reconfigures; True when created."""
        with self.lock:
            created = cfg.name not in self.configs
            if not created:
                self._stop(cfg.name)
            self.configs[cfg.name] = cfg
            self._save()
            if cfg.name not in self.paused:
                self._start(cfg.name)
            return created

    def delete(self, name: str) -> None:
        with self.lock:
            self._stop(name)
            self.configs.pop(name)
            self.paused.discard(name)
            self.failures.pop(name, None)
            self._save()

    def pause(self, name: str) -> None:
        with self.lock:
            if name not in self.paused:
                self.paused.add(name)
                self._stop(name)
                self._save()

    def resume(self, name: str) -> None:
        with self.lock:
            if name in self.paused:
                self.paused.discard(name)
                self._save()
                self._start(name)

    def restart(self, name: str) -> None:
        with self.lock:
            self._stop(name)
            if name not in self.paused:
                self._start(name)

    def status(self, name: str) -> dict[str, Any]:
        cfg = self.configs[name]
        if name in self.paused:
            state: dict[str, Any] = {"state": "PAUSED", "worker_id": "strom-connect"}
            return {"name": name, "connector": state, "tasks": [{"id": 0, **state}], "type": cfg.kind}
        if name in self.failures:
            state = {"state": "FAILED", "worker_id": "strom-connect", "trace": self.failures[name]}
            return {"name": name, "connector": state, "tasks": [{"id": 0, **state}], "type": cfg.kind}
        run = self.runs.get(name)
        if run is None:
            state = {"state": "UNASSIGNED", "worker_id": "strom-connect"}
            return {"name": name, "connector": state, "tasks": [{"id": 0, **state}], "type": cfg.kind}
        return run.status()

    def task_ids(self, name: str) -> list[int]:
        run = self.runs.get(name)
        return [t.task_id for t in run.tasks] if run is not None and run.tasks else [0]

    def info(self, name: str) -> dict[str, Any]:
        cfg = self.configs[name]
        return {
            "name": name,
            "config": cfg.props,
            "tasks": [{"connector": name, "task": i} for i in self.task_ids(name)],
            "type": cfg.kind,
        }

    def shutdown(self) -> None:
        with self.lock:
            for name in list(self.runs):
                self._stop(name)


def make_app(worker: Worker) -> Starlette:
    def known(request: Request) -> str | JSONResponse:
        name = request.path_params["name"]
        if name not in worker.configs:
            return _err(404, f"Connector {name} not found")
        return str(name)

    async def body(request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except ValueError as e:
            raise ConfigError(f"Request body is not valid JSON: {e}") from None

    async def root(request: Request) -> Response:
        return JSONResponse({"version": "strom", "commit": "", "kafka_cluster_id": ""})

    async def plugins(request: Request) -> Response:
        return JSONResponse([{"class": c, "type": s.kind, "version": "strom"} for c, s in CONNECTORS.items()])

    def listing(request: Request) -> Response:
        names = sorted(worker.configs)
        expand = request.query_params.getlist("expand")
        if not expand:
            return JSONResponse(names)
        out: dict[str, Any] = {}
        for n in names:
            out[n] = {}
            if "status" in expand:
                out[n]["status"] = worker.status(n)
            if "info" in expand:
                out[n]["info"] = worker.info(n)
        return JSONResponse(out)

    async def create(request: Request) -> Response:
        try:
            doc = await body(request)
            if not isinstance(doc, dict) or "config" not in doc:
                raise ConfigError('Connector config must be given as {"name": ..., "config": {...}}')
            cfg = parse_config(doc)
        except ConfigError as e:
            return _err(400, str(e))
        if cfg.name in worker.configs:
            return _err(409, f"Connector {cfg.name} already exists")
        from starlette.concurrency import run_in_threadpool

        await run_in_threadpool(worker.put, cfg)
        return JSONResponse(worker.info(cfg.name), status_code=201)

    def get(request: Request) -> Response:
        name = known(request)
        return name if isinstance(name, JSONResponse) else JSONResponse(worker.info(name))

    def get_config(request: Request) -> Response:
        name = known(request)
        return name if isinstance(name, JSONResponse) else JSONResponse(worker.configs[name].props)

    async def put_config(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        name = request.path_params["name"]
        try:
            doc = await body(request)
            cfg = parse_config(doc, name=name)
        except ConfigError as e:
            return _err(400, str(e))
        created = await run_in_threadpool(worker.put, cfg)
        return JSONResponse(worker.info(name), status_code=201 if created else 200)

    def status(request: Request) -> Response:
        name = known(request)
        return name if isinstance(name, JSONResponse) else JSONResponse(worker.status(name))

    def tasks(request: Request) -> Response:
        name = known(request)
        if isinstance(name, JSONResponse):
            return name
        props = worker.configs[name].props
        ids = worker.task_ids(name)
        return JSONResponse([{"id": {"connector": name, "task": i}, "config": props} for i in ids])

    def action(do: Callable[[str], object], status: int) -> Callable[[Request], Response]:
        """An endpoint doing ``do(name)`` to a known connector and answering ``status``."""

        def endpoint(request: Request) -> Response:
            name = known(request)
            if isinstance(name, JSONResponse):
                return name
            do(name)
            return Response(status_code=status)

        return endpoint

    pause = action(worker.pause, 202)
    resume = action(worker.resume, 202)
    restart = action(worker.restart, 204)
    delete = action(worker.delete, 204)

    routes = [
        Route("/", root),
        Route("/connector-plugins", plugins),
        Route("/connectors", listing, methods=["GET"]),
        Route("/connectors", create, methods=["POST"]),
        Route("/connectors/{name}", get, methods=["GET"]),
        Route("/connectors/{name}", delete, methods=["DELETE"]),
        Route("/connectors/{name}/config", get_config, methods=["GET"]),
        Route("/connectors/{name}/config", put_config, methods=["PUT"]),
        Route("/connectors/{name}/status", status, methods=["GET"]),
        Route("/connectors/{name}/tasks", tasks, methods=["GET"]),
        Route("/connectors/{name}/pause", pause, methods=["PUT"]),
        Route("/connectors/{name}/resume", resume, methods=["PUT"]),
        Route("/connectors/{name}/restart", restart, methods=["POST"]),
    ]
    return Starlette(routes=routes)


def serve(bootstrap: str, host: str, port: int, state_dir: Path) -> int:
    import uvicorn

    from strom.connect.runtime import spark_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    spark = spark_session("strom-connect-worker")
    worker = Worker(spark, bootstrap, state_dir)
    try:
        worker.load()
        print(f"strom connect: REST API on http://{host}:{port}", flush=True)
        uvicorn.run(make_app(worker), host=host, port=port, log_level="warning")
    finally:
        worker.shutdown()
        spark.stop()
    return 0
