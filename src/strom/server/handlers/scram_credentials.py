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
  changes applied; the others are applied and persisted together before the answer.
"""

from __future__ import annotations

from typing import Any

from ...protocol.errors import ErrorCode
from ...security.credentials import (
    DUPLICATE_RESOURCE,
    RESOURCE_NOT_FOUND,
    SCRAM_MECHANISMS,
    UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
    CredentialError,
    ScramCredential,
    check_upsertion,
    mechanism_name,
)
from ..context import RequestContext
from . import handler


@handler(50)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> dict[str, Any]:
    store = ctx.broker.sasl.credentials
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
    store = ctx.broker.sasl.credentials
    order: list[str] = []
    errors: dict[str, tuple[int, str | None]] = {}
    deletions: dict[str, str] = {}  # user -> mechanism
    upsertions: dict[str, tuple[str, ScramCredential]] = {}
    duplicate = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")

    def first_time(user: str) -> bool:
        """Whether this user's alteration is to be checked: not after an error; a second one
        undoes the first and is DUPLICATE_RESOURCE."""
        if user not in order:
            order.append(user)
        if user in errors:
            return False
        if deletions.pop(user, None) is not None or upsertions.pop(user, None) is not None:
            errors[user] = duplicate
            return False
        return True

    for d in request.deletions:
        user, mech = str(d.name), mechanism_name(int(d.mechanism))
        if not first_time(user):
            continue
        if not user:
            errors[user] = (UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            errors[user] = (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif store.get(user, mech) is None:
            errors[user] = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        else:
            deletions[user] = mech
    for u in request.upsertions:
        user, mech = str(u.name), mechanism_name(int(u.mechanism))
        if not first_time(user):
            continue
        try:
            m = check_upsertion(user, mech, int(u.iterations), bytes(u.salt), bytes(u.salted_password))
        except CredentialError as e:
            errors[user] = (e.code, str(e) or None)
            continue
        cred = ScramCredential.from_salted_password(
            m, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
        )
        upsertions[user] = (m, cred)
    ok_del = list(deletions.items())
    ok_up = [(user, m, c) for user, (m, c) in upsertions.items()]
    if ok_del or ok_up:
        try:
            store.apply(ok_up, ok_del)
        except OSError as e:
            ctx.broker.storage_log.failed("saving SCRAM credentials to", str(store.path), e,
                                          "answering KAFKA_STORAGE_ERROR; no credential changed")
            for user in [*deletions, *upsertions]:
                errors.setdefault(user, (ErrorCode.KAFKA_STORAGE_ERROR, "storage error"))
        else:
            ctx.broker.storage_log.ok("saving SCRAM credentials to", str(store.path))
    results = []
    for user in order:
        code, message = errors.get(user, (0, None))
        results.append({"user": user, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "results": results}
