"""SCRAM credentials in the metadata log: Kafka's ``ScramControlManager`` (KIP-554 on KRaft).

Theory of operation
-------------------
Replicated state: one credential per (mechanism, user), what RFC 5802 lets a server keep
(salt, StoredKey, ServerKey, iterations), as ``UserScramCredentialRecord`` /
``RemoveUserScramCredentialRecord`` put it; every broker authenticates from its image's
``ScramImage``, so a user created through any node logs in at all of them.

AlterUserScramCredentials (51) is planned by :func:`plan_alteration`, the same rules a Kafka 4
controller applies (``alterCredentials``), per user *name*: deletions are checked first, then
upsertions; a user altered twice in one request (even for two mechanisms) is DUPLICATE_RESOURCE
and none of its changes are kept; an empty name, or iterations outside the mechanism's
minimum..16384, is UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM;
deleting a credential that does not exist RESOURCE_NOT_FOUND; an empty salted password
UNKNOWN_SERVER_ERROR (Kafka fails deriving the keys from it). The planner only asks whether a
credential exists (``exists``), so the registry path (one node's credential store,
:mod:`strom.server.handlers.scram_credentials`) uses it too.

:class:`ScramControlManager` turns a plan into records (a RemoveUserScramCredentialRecord per
deletion, a UserScramCredentialRecord per upsertion, the keys derived from the salted password
here: the password never reaches the log) and mutates only in :meth:`replay`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..metadata.image import ScramCredentialData, ScramKey
from ..metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from ..security.credentials import (
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

__all__ = ["AlterationPlan", "ScramControlManager", "plan_alteration"]

_DUPLICATE = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")


@dataclass
class AlterationPlan:
    """What an AlterUserScramCredentials request does: the users in the order they first
    appear, each one's error, and the accepted deletions and upsertions (by user)."""

    order: list[str] = field(default_factory=list)
    errors: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    deletions: dict[str, str] = field(default_factory=dict)  # user -> mechanism name
    upsertions: dict[str, tuple[str, ScramCredential]] = field(default_factory=dict)

    def response(self) -> dict[str, Any]:
        results = []
        for user in self.order:
            code, message = self.errors.get(user, (0, None))
            results.append({"user": user, "error_code": code, "error_message": message})
        return {"throttle_time": 0, "results": results}


def plan_alteration(request: Any, exists: Callable[[str, str], bool]) -> AlterationPlan:
    """Check a request's deletions and upsertions (see the module docstring); ``exists(user,
    mechanism name)``: whether that credential is there now."""
    plan = AlterationPlan()

    def first_time(user: str) -> bool:
        """Whether this user's alteration is to be checked: not after an error; a second one
        undoes the first and is DUPLICATE_RESOURCE."""
        if user not in plan.order:
            plan.order.append(user)
        if user in plan.errors:
            return False
        if plan.deletions.pop(user, None) is not None or plan.upsertions.pop(user, None) is not None:
            plan.errors[user] = _DUPLICATE
            return False
        return True

    for d in request.deletions:
        user, mech = str(d.name), mechanism_name(int(d.mechanism))
        if not first_time(user):
            continue
        if not user:
            plan.errors[user] = (UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            plan.errors[user] = (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif not exists(user, mech):
            plan.errors[user] = (
                RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            plan.deletions[user] = mech
    for u in request.upsertions:
        user, mech = str(u.name), mechanism_name(int(u.mechanism))
        if not first_time(user):
            continue
        salt, salted = bytes(u.salt), bytes(u.salted_password)
        try:
            m = check_upsertion(user, mech, int(u.iterations), salt, salted)
        except CredentialError as e:
            plan.errors[user] = (e.code, str(e) or None)
            continue
        plan.upsertions[user] = (m, ScramCredential.from_salted_password(m, salt, salted, int(u.iterations)))
    return plan


def mechanism_id(name: str) -> int:
    return SCRAM_MECHANISMS[name][0]


class ScramControlManager:
    """The SCRAM credentials of the cluster, by (mechanism id, user)."""

    def __init__(self) -> None:
        self.credentials: dict[ScramKey, ScramCredentialData] = {}

    def exists(self, user: str, mechanism: str) -> bool:
        return ScramKey(mechanism_id(mechanism), user) in self.credentials

    def alter_credentials(self, request: Any) -> tuple[list[Any], dict[str, Any]]:
        """AlterUserScramCredentials: the records and the response (nothing mutated)."""
        plan = plan_alteration(request, self.exists)
        records: list[Any] = [
            RemoveUserScramCredentialRecord(name=user, mechanism=mechanism_id(mech))
            for user, mech in plan.deletions.items()
        ]
        for user, (mech, cred) in plan.upsertions.items():
            records.append(
                UserScramCredentialRecord(
                    name=user,
                    mechanism=mechanism_id(mech),
                    salt=cred.salt,
                    stored_key=cred.stored_key,
                    server_key=cred.server_key,
                    iterations=cred.iterations,
                )
            )
        return records, plan.response()

    def replay(self, record: UserScramCredentialRecord | RemoveUserScramCredentialRecord) -> None:
        key = ScramKey(record.mechanism, record.name)
        if isinstance(record, UserScramCredentialRecord):
            self.credentials[key] = ScramCredentialData(
                record.salt, record.stored_key, record.server_key, record.iterations
            )
        else:
            self.credentials.pop(key, None)

    def to_records(self) -> list[UserScramCredentialRecord]:
        return [
            UserScramCredentialRecord(
                name=key.name,
                mechanism=key.mechanism,
                salt=c.salt,
                stored_key=c.stored_key,
                server_key=c.server_key,
                iterations=c.iterations,
            )
            for key, c in sorted(self.credentials.items())
        ]
