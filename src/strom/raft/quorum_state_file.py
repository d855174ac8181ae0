"""The ``quorum-state`` file: the election state a KRaft node persists (Kafka's FileQuorumStateStore).

Theory of operation
-------------------
The file lives in ``metadata.log.dir`` and holds one line of JSON, Kafka's ``QuorumStateData``
plus a ``data_version`` field. strom writes version 1, as Kafka 4 does::

    {"leaderId":1,"leaderEpoch":5,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}

``-1`` means "none" for ``leaderId`` and ``votedId``; ``votedDirectoryId`` is Kafka's base64url
UUID of the voted replica's directory (KIP-853), always the zero UUID here (strom's
:class:`~strom.raft.log.ElectionState` has no directory ids). Reading accepts version 0 as well
(it has ``clusterId``, ``appliedOffset`` and ``currentVoters`` in place of ``votedDirectoryId``;
they are ignored).

:meth:`FileQuorumStateStore.write` replaces the file atomically and durably
(:func:`strom.durable_file.replace_file`: temporary sibling, fsync, rename, fsync of the
directory), so a crash leaves the old or the new state, never a mix; the Raft state machine calls
it before answering a Vote or acting on a new epoch.

Error contract: a file that is not valid JSON, not an object, without ``data_version``, of an
unsupported version or with a field of the wrong type raises :class:`RaftStorageError` naming
the file; so does any ``OSError`` while reading or writing. A missing file reads as ``None``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.durable_file import replace_file
from strom.raft.log import ElectionState, QuorumStateStore, RaftStorageError

__all__ = ["QUORUM_STATE_FILE", "FileQuorumStateStore"]

QUORUM_STATE_FILE = "quorum-state"
DATA_VERSION = 1
_SUPPORTED_VERSIONS = (0, 1)
_NONE = -1
ZERO_DIRECTORY_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID.toString()
_INT32 = (-(2**31), 2**31 - 1)


class FileQuorumStateStore:
    """:class:`~strom.raft.log.QuorumStateStore` on the ``quorum-state`` file in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / QUORUM_STATE_FILE

    def read(self) -> ElectionState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise RaftStorageError(f"cannot read the quorum state file {self.path}: {e}") from e
        return parse_quorum_state(text, self.path)

    def write(self, state: ElectionState) -> None:
        if state.epoch < 0:
            raise ValueError(f"an election state's epoch cannot be negative: {state.epoch}")
        data = {
            "leaderId": _NONE if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": _NONE if state.voted_id is None else state.voted_id,
            "votedDirectoryId": ZERO_DIRECTORY_ID,
            "data_version": DATA_VERSION,
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.path, json.dumps(data, separators=(",", ":")).encode())
        except OSError as e:
            raise RaftStorageError(f"cannot write the quorum state file {self.path}: {e}") from e

    def __repr__(self) -> str:
        return f"FileQuorumStateStore({str(self.path)!r})"


def parse_quorum_state(text: str, path: Path | str) -> ElectionState:
    """The election state in ``text`` (the file's content); RaftStorageError naming ``path``."""
    line = text.split("\n", 1)[0]
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise RaftStorageError(f"the quorum state file {path} is not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise RaftStorageError(f"the quorum state file {path} does not hold a JSON object")
    if "data_version" not in obj:
        raise RaftStorageError(f"the quorum state file {path} has no data_version field")
    version = _int_field(obj, "data_version", path)
    if version not in _SUPPORTED_VERSIONS:
        raise RaftStorageError(
            f"the quorum state file {path} has data_version {version}; supported: "
            f"{_SUPPORTED_VERSIONS[0]} to {_SUPPORTED_VERSIONS[-1]}"
        )
    epoch = _int_field(obj, "leaderEpoch", path)
    leader = _int_field(obj, "leaderId", path)
    voted = _int_field(obj, "votedId", path)
    if epoch < 0:
        raise RaftStorageError(f"the quorum state file {path} has a negative leaderEpoch {epoch}")
    if version >= 1 and not isinstance(obj.get("votedDirectoryId", ZERO_DIRECTORY_ID), str):
        raise RaftStorageError(f"the quorum state file {path} has a votedDirectoryId that is not a string")
    return ElectionState(
        epoch=epoch,
        leader_id=None if leader == _NONE else leader,
        voted_id=None if voted == _NONE else voted,
    )


def _int_field(obj: dict[str, Any], name: str, path: Path | str) -> int:
    value = obj.get(name, _NONE)
    if isinstance(value, bool) or not isinstance(value, int) or not _INT32[0] <= value <= _INT32[1]:
        raise RaftStorageError(f"the quorum state file {path} has an invalid {name}: {value!r}")
    if value < _NONE and name != "data_version":
        raise RaftStorageError(f"the quorum state file {path} has an invalid {name}: {value}")
    return value


if TYPE_CHECKING:

    def _implements_store(store: FileQuorumStateStore) -> QuorumStateStore:  # checked by mypy
        return store
