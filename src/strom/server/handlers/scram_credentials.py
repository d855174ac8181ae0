"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Clients send the salted password (``Hi(password, salt, iterations)``), never the password; the
broker keeps salt, StoredKey, ServerKey and iterations (:mod:`strom.security.credentials`).
Errors are per user, with Kafka's codes and rules:

- describe: no users (null or empty) lists every user with credentials; an unknown user ->
  RESOURCE_NOT_FOUND; a user named twice -> DUPLICATE_RESOURCE.
- alter: an unknown mechanism -> UNSUPPORTED_SASL_MECHANISM; iterations outside 4096..16384 or an
  empty name/salt/salted password -> UNACCEPTABLE_CREDENTIAL; deleting a credential that does not
  exist -> RESOURCE_NOT_FOUND; the same user and mechanism twice in one request ->
  DUPLICATE_RESOURCE. A user with any error has none of its changes applied; the others are
  applied and persisted together before the answer.
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
from .sasl import sasl_state


@handler(50)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> dict[str, Any]:
    store = sasl_state(ctx.broker).credentials
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
                    name, DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for the same user twice"
                )
            )
        elif not creds:
            results.append(
                _described(
                    name, RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist"
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
    store = sasl_state(ctx.broker).credentials
    order: list[str] = []
    errors: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, str | int]] = set()
    deletions: list[tuple[str, str]] = []
    upsertions: list[tuple[str, str, ScramCredential]] = []

    def note(user: str, mech: str | None, wire_id: int) -> bool:
        """False (and an error) if this user and mechanism were already named."""
        if user not in order:
            order.append(user)
        key: tuple[str, str | int] = (user, mech if mech is not None else wire_id)
        if key in seen:
            errors.setdefault(
                user, (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
            )
            return False
        seen.add(key)
        return True

    for d in request.deletions:
        user, mech = str(d.name), mechanism_name(int(d.mechanism))
        if not note(user, mech, int(d.mechanism)):
            continue
        if not user:
            errors.setdefault(user, (UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
        elif mech is None:
            errors.setdefault(user, (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
        elif store.get(user, mech) is None:
            errors.setdefault(
                user, (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            )
        else:
            deletions.append((user, mech))
    for u in request.upsertions:
        user, mech = str(u.name), mechanism_name(int(u.mechanism))
        if not note(user, mech, int(u.mechanism)):
            continue
        try:
            m = check_upsertion(user, mech, int(u.iterations), bytes(u.salt), bytes(u.salted_password))
        except CredentialError as e:
            errors.setdefault(user, (e.code, str(e)))
            continue
        cred = ScramCredential.from_salted_password(
            m, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
        )
        upsertions.append((user, m, cred))
    ok_del = [(user, m) for user, m in deletions if user not in errors]
    ok_up = [(user, m, c) for user, m, c in upsertions if user not in errors]
    if ok_del or ok_up:
        try:
            store.apply(ok_up, ok_del)
        except OSError as e:
            ctx.broker.storage_log.failed("saving SCRAM credentials to", str(store.path), e,
                                          "answering KAFKA_STORAGE_ERROR; no credential changed")
            for user in [u for u, *_ in ok_del] + [u for u, *_ in ok_up]:
                errors.setdefault(user, (ErrorCode.KAFKA_STORAGE_ERROR, "storage error"))
        else:
            ctx.broker.storage_log.ok("saving SCRAM credentials to", str(store.path))
    results = []
    for user in order:
        code, message = errors.get(user, (0, None))
        results.append({"user": user, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "results": results}
