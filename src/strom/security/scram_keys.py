"""SCRAM's key derivation (RFC 5802) and Kafka's SCRAM mechanisms, shared by the broker's
credential store, the client's SCRAM exchange and the admin helper that sets credentials.

Kafka derives from the password's raw UTF-8 bytes (no SASLprep), and so does strom everywhere.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["SCRAM_MECHANISMS", "salted_password", "scram_keys"]

# Kafka's ScramMechanism: mechanism name -> (wire id, hash name)
SCRAM_MECHANISMS: dict[str, tuple[int, str]] = {
    "SCRAM-SHA-256": (1, "sha256"),
    "SCRAM-SHA-512": (2, "sha512"),
}


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 ``Hi(password, salt, i)``: PBKDF2-HMAC over the password's UTF-8 bytes."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def scram_keys(hash_name: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a salted password."""
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    return client_key, stored_key, server_key
