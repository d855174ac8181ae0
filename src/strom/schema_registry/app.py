"""Confluent Schema Registry's REST API on Starlette (served by uvicorn)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from strom.schema_registry import protobuf_schema
from strom.schema_registry.auth import WRITE_ROLES, Credential, authenticate, load_realm
from strom.schema_registry.election import LeaderElector
from strom.schema_registry.registry import Registry, RegistryError, schema_not_found
from strom.schema_registry.store import StoreError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
log = logging.getLogger("strom.schema_registry")


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status_code=status, media_type=CONTENT_TYPE)


def _error(status: int, code: int, message: str) -> Response:
    return _json({"error_code": code, "message": message}, status)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


def _subject(request: Request) -> str:
    return str(request.path_params["subject"])  # the server has percent-decoded the path


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise RegistryError(422, 42201, f"Invalid JSON body: {e}") from e
    if not isinstance(body, dict):
        raise RegistryError(422, 42201, "The request body must be a JSON object")
    return body


FORWARDED = "X-Strom-Registry-Forwarded"


def _forward(leader: str, request: Request, raw: bytes) -> Response:
    """Sends a write to the leader instance; its answer is returned as is."""
    import urllib.error
    import urllib.parse
    import urllib.request

    log.info("forwarding %s %s to the leader %s", request.method, request.url.path, leader)
    raw_path = request.scope.get("raw_path")  # as the client quoted it
    path = raw_path.decode("ascii") if raw_path else urllib.parse.quote(request.url.path)
    root = str(request.scope.get("root_path", ""))  # mounted under a prefix (the broker's listener)
    if root and path.startswith(root + "/"):
        path = path[len(root):]
    url = leader.rstrip("/") + path + (f"?{request.url.query}" if request.url.query else "")
    headers = {"Content-Type": CONTENT_TYPE, FORWARDED: "1"}
    if "authorization" in request.headers:  # the leader checks the same credentials
        headers["Authorization"] = request.headers["authorization"]
    req = urllib.request.Request(url, data=raw if request.method in ("POST", "PUT") else None,
                                 method=request.method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return Response(resp.read(), status_code=resp.status, media_type=CONTENT_TYPE)
    except urllib.error.HTTPError as e:
        return Response(e.read(), status_code=e.code, media_type=CONTENT_TYPE)
    except OSError as e:
        raise RegistryError(500, 50003,
                            f"Error while forwarding the request to the leader {leader}: {e}") from e


def _write_target(elector: LeaderElector | None, wait: float = 15.0) -> str | None:
    """The leader's URL when another instance leads; None when this one writes itself."""
    if elector is None:
        return None
    deadline = time.monotonic() + wait
    while True:
        url = elector.leader_url()
        if url is not None:
            return None if url == elector.my_url else url
        if time.monotonic() > deadline:
            log.warning("no registry leader known after %.0fs: writing from this instance", wait)
            return None
        time.sleep(0.2)


def _forward_to_leader(elector: LeaderElector | None, request: Request, raw: bytes,
                       patience: float = 20.0) -> Response | None:
    """Forwards to the leader (retrying while a new one is elected); None: this instance writes."""
    deadline = time.monotonic() + patience
    while True:
        leader = _write_target(elector)
        if leader is None or elector is None:
            return None
        try:
            return _forward(leader, request, raw)
        except RegistryError:
            if time.monotonic() > deadline:
                raise
            elector.forget_leader()
            time.sleep(0.5)


def build_app(registry: Registry, elector: LeaderElector | None = None,
              users: dict[str, Credential] | None = None) -> Starlette:
    """The REST API; ``users``: HTTP basic auth required (user -> credential and roles, see
    :mod:`strom.schema_registry.auth`), else open."""
    Endpoint = Callable[[Request, dict[str, Any]], Any]

    def handler(fn: Endpoint, write: tuple[str, ...] = ()) -> Callable[[Request], Any]:
        async def wrapped(request: Request) -> Response:
            from starlette.concurrency import run_in_threadpool

            if users is not None:
                who = authenticate(request.headers.get("authorization", ""), users)
                if who is None:
                    denied = _error(401, 401, "Unauthorized")
                    denied.headers["WWW-Authenticate"] = 'Basic realm="SchemaRegistry"'
                    return denied
                if request.method in write and not who.may_write:
                    return _error(
                        403,
                        40301,
                        f"User {who.user} is denied operation Write on {request.url.path} (roles: "
                        f"{', '.join(who.roles)}; writes need the role {' or '.join(sorted(WRITE_ROLES))})",
                    )
            try:
                if request.method in write and FORWARDED not in request.headers:
                    raw = await request.body()
                    resp = await run_in_threadpool(_forward_to_leader, elector, request, raw)
                    if resp is not None:
                        if resp.status_code < 300:  # read our own write before answering
                            await run_in_threadpool(registry.store.wait_caught_up)
                        return resp
                body = await _body(request) if request.method in ("POST", "PUT") else {}
                result = await run_in_threadpool(fn, request, body)
            except RegistryError as e:
                return _error(e.status, e.code, e.message)
            except StoreError as e:
                return _error(500, 50001, f"Error in the backend data store - {e}")
            except Exception as e:  # an unexpected bug: answer as Confluent does, keep serving
                log.exception("internal error on %s %s", request.method, request.url.path)
                return _error(500, 50001, f"Error in the backend data store - {type(e).__name__}: {e}")
            if isinstance(result, Response):
                return result
            return _json(result)

        return wrapped

    r = registry

    def root(req: Request, body: dict[str, Any]) -> Any:
        return {}

    def subjects(req: Request, body: dict[str, Any]) -> Any:
        return r.subjects(deleted=_flag(req, "deleted"), prefix=req.query_params.get("subjectPrefix", ""))

    def versions(req: Request, body: dict[str, Any]) -> Any:
        if req.method == "POST":
            return {"id": r.register(_subject(req), body)["id"]}
        return r.versions(_subject(req), deleted=_flag(req, "deleted"))

    def version(req: Request, body: dict[str, Any]) -> Any:
        s, v = _subject(req), req.path_params["version"]
        if req.method == "DELETE":
            return r.delete_version(s, v, _flag(req, "permanent"))
        info = r.version(s, v, deleted=_flag(req, "deleted"))
        return _format(info, req)

    def version_schema(req: Request, body: dict[str, Any]) -> Any:
        info = r.version(_subject(req), req.path_params["version"], deleted=_flag(req, "deleted"))
        return Response(info["schema"], media_type=CONTENT_TYPE)

    def referenced_by(req: Request, body: dict[str, Any]) -> Any:
        return r.referenced_by(_subject(req), req.path_params["version"])

    def subject(req: Request, body: dict[str, Any]) -> Any:
        s = _subject(req)
        if req.method == "DELETE":
            return r.delete_subject(s, _flag(req, "permanent"))
        return r.lookup(s, body, deleted=_flag(req, "deleted"))

    def _id(req: Request) -> int:
        try:
            return int(req.path_params["id"])
        except ValueError:
            raise schema_not_found() from None

    def by_id(req: Request, body: dict[str, Any]) -> Any:
        rec = r.schema_by_id(_id(req))
        subject_filter = req.query_params.get("subject")
        if subject_filter and not any(s == subject_filter for s, _ in r.subject_versions_of(rec.id, True)):
            pass  # Confluent falls back to any subject
        return _format(rec.to_response(), req)

    def by_id_schema(req: Request, body: dict[str, Any]) -> Any:
        return Response(r.schema_by_id(_id(req)).schema, media_type=CONTENT_TYPE)

    def by_id_subjects(req: Request, body: dict[str, Any]) -> Any:
        return sorted({s for s, _ in r.subject_versions_of(_id(req), _flag(req, "deleted"))})

    def by_id_versions(req: Request, body: dict[str, Any]) -> Any:
        pairs = r.subject_versions_of(_id(req), _flag(req, "deleted"))
        return [{"subject": s, "version": n} for s, n in pairs]

    def all_schemas(req: Request, body: dict[str, Any]) -> Any:
        q = req.query_params
        return r.all_schemas(q.get("subjectPrefix", ""), _flag(req, "deleted"), _flag(req, "latestOnly"))

    def contexts(req: Request, body: dict[str, Any]) -> Any:
        return ["."]  # the default context only

    def types(req: Request, body: dict[str, Any]) -> Any:
        return ["JSON", "PROTOBUF", "AVRO"]

    def config(req: Request, body: dict[str, Any]) -> Any:
        s = str(req.path_params["subject"]) if "subject" in req.path_params else None
        if req.method == "PUT":
            requested = body.get("compatibility", body.get("compatibilityLevel"))
            return {"compatibility": r.set_config(s, requested)}
        if req.method == "DELETE":
            return {"compatibilityLevel": r.delete_config(s)}
        level = r.compatibility(s, default_to_global=_flag(req, "defaultToGlobal"))
        if level is None:
            raise RegistryError(404, 40408, f"Subject '{s}' does not have subject-level compatibility "
                                "configured")
        return {"compatibilityLevel": level}

    def mode(req: Request, body: dict[str, Any]) -> Any:
        s = str(req.path_params["subject"]) if "subject" in req.path_params else None
        if req.method == "PUT":
            return {"mode": r.set_mode(s, body.get("mode"), _flag(req, "force"))}
        if req.method == "DELETE":
            if s is None:
                raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
            return {"mode": r.delete_mode(s)}
        m = r.mode(s, default_to_global=s is None or _flag(req, "defaultToGlobal"))
        if m is None:
            raise RegistryError(404, 40409, f"Subject '{s}' does not have subject-level mode configured")
        return {"mode": m}

    def compatibility(req: Request, body: dict[str, Any]) -> Any:
        v = req.path_params.get("version")
        problems = r.test_compatibility(_subject(req), v, body)
        out: dict[str, Any] = {"is_compatible": not problems}
        if _flag(req, "verbose"):
            out["messages"] = problems
        return out

    def _format(info: dict[str, Any], req: Request) -> dict[str, Any]:
        # confluent-kafka's Protobuf serdes ask for format=serialized (a base64 descriptor)
        if req.query_params.get("format") == "serialized" and info.get("schemaType") == "PROTOBUF":
            try:
                return {**info, "schema": protobuf_schema.to_serialized(info["schema"])}
            except protobuf_schema.ProtobufError as e:
                raise RegistryError(422, 42201, str(e)) from e
        return info

    S = "/subjects/{subject}"
    routes = [
        Route("/", handler(root), methods=["GET"]),
        Route("/subjects", handler(subjects), methods=["GET"]),
        Route(S + "/versions", handler(versions, ("POST",)), methods=["GET", "POST"]),
        Route(S + "/versions/{version}", handler(version, ("DELETE",)),
              methods=["GET", "DELETE"]),
        Route(S + "/versions/{version}/schema", handler(version_schema), methods=["GET"]),
        Route(S + "/versions/{version}/referencedby", handler(referenced_by),
              methods=["GET"]),
        Route(S, handler(subject, ("DELETE",)), methods=["POST", "DELETE"]),
        Route("/schemas/ids/{id}", handler(by_id), methods=["GET"]),
        Route("/schemas/ids/{id}/schema", handler(by_id_schema), methods=["GET"]),
        Route("/schemas/ids/{id}/subjects", handler(by_id_subjects), methods=["GET"]),
        Route("/schemas/ids/{id}/versions", handler(by_id_versions), methods=["GET"]),
        Route("/schemas/types", handler(types), methods=["GET"]),
        Route("/schemas", handler(all_schemas), methods=["GET"]),
        Route("/contexts", handler(contexts), methods=["GET"]),
        Route("/config", handler(config, ("PUT", "DELETE")), methods=["GET", "PUT"]),
        Route("/config/{subject}", handler(config, ("PUT", "DELETE")), methods=["GET", "PUT", "DELETE"]),
        Route("/mode", handler(mode, ("PUT", "DELETE")), methods=["GET", "PUT"]),
        Route("/mode/{subject}", handler(mode, ("PUT", "DELETE")), methods=["GET", "PUT", "DELETE"]),
        Route("/compatibility/subjects/{subject}/versions/{version}", handler(compatibility),
              methods=["POST"]),
        Route("/compatibility/subjects/{subject}/versions", handler(compatibility), methods=["POST"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, 404, "HTTP 404 Not Found")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _error(405, 405, "HTTP 405 Method Not Allowed")

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})


def load_properties(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            k, sep, v = line.partition("=")
            if not sep:
                k, _, v = line.partition(":")
            out[k.strip()] = v.strip()
    return out


# Java client settings librdkafka spells differently (PEM stores only, as strom's own tools)
_RENAMED = {"ssl.truststore.location": "ssl.ca.location", "ssl.keystore.location": "ssl.certificate.location"}
_JAVA_ONLY = ("ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password", "ssl.keystore.password",
              "ssl.endpoint.identification.algorithm", "sasl.jaas.config")


def client_config(props: dict[str, str]) -> dict[str, str]:
    """Kafka (Java) client properties -> librdkafka settings: ``sasl.jaas.config``'s PLAIN/SCRAM
    username and password become ``sasl.username``/``sasl.password``; PEM trust/key stores are
    passed by path."""
    from strom.client.security import parse_jaas_config

    out = {k: v for k, v in props.items() if k not in _JAVA_ONLY and k not in _RENAMED}
    for java, rd in _RENAMED.items():
        if java in props:
            out[rd] = props[java]
    if "sasl.jaas.config" in props:
        _module, options = parse_jaas_config(props["sasl.jaas.config"])
        if "username" in options:
            out["sasl.username"] = options["username"]
        if "password" in options:
            out["sasl.password"] = options["password"]
    if props.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def serve(bootstrap: str, host: str, port: int, command_config: str | None = None,
          topic: str = "_schemas", advertised_url: str | None = None,
          group_id: str = "schema-registry", basic_auth_file: str | None = None,
          ssl_certfile: str | None = None, ssl_keyfile: str | None = None) -> int:
    import uvicorn

    from strom.schema_registry.store import KafkaStore

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    conf = {"bootstrap.servers": bootstrap}
    if command_config:
        try:
            conf.update(client_config(load_properties(command_config)))
        except (OSError, ValueError) as e:
            print(f"strom schema-registry: error: --command-config {command_config}: {e}", file=sys.stderr)
            return 2
    users = None
    if basic_auth_file:
        try:
            users = load_realm(basic_auth_file)
        except (OSError, ValueError) as e:
            print(f"strom schema-registry: error: --basic-auth-file: {e}", file=sys.stderr)
            return 2
    if bool(ssl_certfile) != bool(ssl_keyfile):
        print("strom schema-registry: error: --ssl-certfile and --ssl-keyfile go together", file=sys.stderr)
        return 2
    try:
        store = KafkaStore(conf, topic=topic)
    except StoreError as e:
        print(f"strom schema-registry: error: {e}", file=sys.stderr)
        return 1
    my_url = advertised_url or f"{'https' if ssl_certfile else 'http'}://{host}:{port}"
    elector = LeaderElector(conf, topic, my_url, group_id)
    app = build_app(Registry(store), elector, users)
    log.info("schema registry listening on %s://%s:%d (state in %s, advertised as %s)",
             "https" if ssl_certfile else "http", host, port, topic, my_url)
    try:
        # clients keep connections alive (confluent-kafka's does): a stop waits at most 3 s for them
        uvicorn.run(app, host=host, port=port, log_level="warning", ssl_certfile=ssl_certfile,
                    ssl_keyfile=ssl_keyfile, timeout_graceful_shutdown=3)
    finally:
        elector.close()
        store.close()
    return 0
