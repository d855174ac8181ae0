"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Clients send the salted password (``Hi(password, salt, iterations)``), never the password; the
broker keeps salt, StoredKey, ServerKey and iterations (:mod:`strom.security.credentials`).
Errors are per user, with Kafka's codes and rules:

- describe (Kafka's ScramImage.describe): no users (null or empty) lists every user with
  credentials; an unknown user -> RESOURCE_NOT_FOUND; a user named twice -> DUPLICATE_RESOURCE
  (Kafka's messages, ending with the user's name).
- alter, as a Kafka 4 controller (``ScramControlManager.alterCredentials``): deletions are
  checked first, then upsertions, per user *name*: a user altered twice in one request, even for
  two mechanisms, -> DUPLICATE_RESOURCE (so ``kafka-configs --add-config
  'SCRAM-SHA-256=[..],SCRAM-SHA-512=[..]'`` is refused by Kafka 4 too); an empty name or
  iterations outside the mechanism's minimum..16384 -> UNACCEPTABLE_CREDENTIAL; an unknown
  mechanism -> UNSUPPORTED_SASL_MECHANISM; deleting a credential that does not exist ->
  RESOURCE_NOT_FOUND; an empty salted password -> UNKNOWN_SERVER_ERROR (Kafka fails deriving the
  keys from it). Any salt is accepted, even an empty one. A user with an error has none of its
  changes applied; the others are applied and persisted together before the answer (the rules
  are :func:`strom.controller.scram_control.plan_alteration`).

Where the credentials live: without the metadata quorum, in this node's credential store (its
first log dir). On the quorum (KIP-554 on KRaft) the request is forwarded to the active
controller, which writes UserScramCredentialRecord / RemoveUserScramCredentialRecord; the answer
waits until this broker applied them, and describe reads this broker's metadata image, as SCRAM
logins do (:class:`strom.security.sasl.SaslState`), so every broker knows the same users.
"""

from __future__ import annotations

from typing import Any

from ...controller.scram_control import plan_alteration
from ...metadata.image import MetadataImage, ScramKey
from ...protocol.errors import ErrorCode
from ...security.credentials import (
    DUPLICATE_RESOURCE,
    RESOURCE_NOT_FOUND,
    SCRAM_MECHANISMS,
    ScramCredential,
    mechanism_name,
)
from ..authz import AclOperation, authorized_cluster
from ..context import RequestContext
from . import handler
from .forwarding import forward_to_controller


@handler(50)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> dict[str, Any]:
    store = ctx.broker.sasl.credential_view()  # (on the metadata quorum: the image's)
    results: list[dict[str, Any]] = []
    names = [str(u.name) for u in (request.users or ())]
    if not names:
        names = store.users()
    dups = {n for n in names if names.count(n) > 1}
    done: set[str] = set()
    for name in names:
        if name in done:
            continue
        done.add(name)
        creds = store.credentials(name)
        if name in dups:
            results.append(
                _described(
                    name,
                    DUPLICATE_RESOURCE,
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                )
            )
        elif not creds:
            results.append(
                _described(
                    name,
                    RESOURCE_NOT_FOUND,
                    f"Attempt to describe a user credential that does not exist: {name}",
                )
            )
        else:
            infos = [
                {"mechanism": SCRAM_MECHANISMS[m][0], "iterations": c.iterations}
                for m, c in sorted(creds.items())
            ]
            results.append(_described(name, 0, None, infos))
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}


def _described(
    user: str, code: int, message: str | None, infos: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": infos or []}


@handler(51)
async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not authorized_cluster(ctx, AclOperation.ALTER):
        # Kafka: ALTER on the cluster, else every user named fails
        users = list(dict.fromkeys(str(x.name) for x in (*request.deletions, *request.upsertions)))
        return {
            "throttle_time": 0,
            "results": [
                {"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
                for u in users
            ],
        }
    if getattr(ctx.broker, "quorum", None) is not None:
        return await _alter_on_quorum(ctx, request)
    store = ctx.broker.sasl.credentials
    plan = plan_alteration(request, lambda user, mech: store.get(user, mech) is not None)
    ok_del = list(plan.deletions.items())
    ok_up = [(user, m, c) for user, (m, c) in plan.upsertions.items()]
    if ok_del or ok_up:
        try:
            store.apply(ok_up, ok_del)
        except OSError as e:
            ctx.broker.storage_log.failed("saving SCRAM credentials to", str(store.path), e,
                                          "answering KAFKA_STORAGE_ERROR; no credential changed")
            for user in [*plan.deletions, *plan.upsertions]:
                plan.errors.setdefault(user, (ErrorCode.KAFKA_STORAGE_ERROR, "storage error"))
        else:
            ctx.broker.storage_log.ok("saving SCRAM credentials to", str(store.path))
    return plan.response()


async def _alter_on_quorum(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """The controller decides and writes the records (forwarded with the client's principal);
    the answer waits until this broker applied them, so a login here right after succeeds."""
    response = await forward_to_controller(ctx, request)
    done = {str(r["user"]) for r in response.get("results", ()) if not r["error_code"]}
    wanted: dict[ScramKey, bytes | None] = {}  # the stored key each changed credential must have
    for d in request.deletions:
        if str(d.name) in done:
            wanted[ScramKey(int(d.mechanism), str(d.name))] = None
    for u in request.upsertions:
        mech = mechanism_name(int(u.mechanism))
        if str(u.name) in done and mech is not None:
            cred = ScramCredential.from_salted_password(
                mech, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
            )
            wanted[ScramKey(int(u.mechanism), str(u.name))] = cred.stored_key

    def applied(image: MetadataImage) -> bool:
        creds = image.scram.credentials
        for key, stored in wanted.items():
            c = creds.get(key)
            if (c.stored_key if c is not None else None) != stored:
                return False
        return True

    quorum = getattr(ctx.broker, "quorum", None)
    if wanted and quorum is not None:
        await quorum.settle_image(applied)
    return response
