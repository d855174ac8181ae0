"""HTTP basic auth of the schema registry: Confluent's ``authentication.method=BASIC`` with a
realm file in Jetty's ``PropertyFileLoginModule`` format, and roles.

A realm file has ``user: credential[,role ...]`` lines (``#``/``!`` comments). The credential is
a plain password or one of Jetty's forms (``org.eclipse.jetty.util.security.Password`` makes
them): ``OBF:`` (obfuscated; decoded when the file is read: it hides a password from a glance,
nothing more), ``MD5:`` (the hex MD5 of the password) or ``CRYPT:`` (Unix ``crypt(3)``: Jetty's
is DES crypt salted with the user name; any scheme the C library knows is accepted). Passwords
are compared in constant time.

Roles: a user with no role, or with the role ``admin`` or ``developer``, may read and write; a
user whose roles are all others (``readonly``, ``reader``, ``user`` ...) may only read: a write
(registering or deleting a schema, ``PUT``/``DELETE`` of ``/config`` and ``/mode``) is answered
403 with error code 40301. Lookups (``POST /subjects/{s}``) and compatibility checks
(``POST /compatibility/...``) are reads, as in Confluent's RBAC.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import warnings
from dataclasses import dataclass
from typing import Any

WRITE_ROLES = frozenset({"admin", "developer"})


def deobfuscate(s: str) -> str:
    """Jetty's ``Password.deobfuscate``: ``OBF:`` + 4 base-36 digits per byte (``U`` + 4 digits
    for a byte pair with a negative byte)."""
    if s.startswith("OBF:"):
        s = s[4:]
    out = bytearray()
    i = 0
    try:
        while i < len(s):
            if s[i] == "U":
                i += 1
                n = int(s[i : i + 4], 36)
                out.append((n >> 8) & 0xFF)
            else:
                n = int(s[i : i + 4], 36)
                out.append(((n // 256 + n % 256 - 254) // 2) & 0xFF)
            i += 4
        return out.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not a valid OBF: password") from None


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def obfuscate(password: str) -> str:
    """Jetty's ``Password.obfuscate`` (the inverse of :func:`deobfuscate`)."""
    b = [x - 256 if x > 127 else x for x in password.encode("utf-8")]  # Java's signed bytes
    out = ["OBF:"]
    for i, b1 in enumerate(b):
        b2 = b[len(b) - (i + 1)]
        if b1 < 0 or b2 < 0:
            x = _base36((b1 & 0xFF) * 256 + (b2 & 0xFF))
            out.append("U0000"[: 5 - len(x)] + x)
        else:
            x = _base36((127 + b1 + b2) * 256 + (127 + b1 - b2))
            out.append("000"[: 4 - len(x)] + x)
    return "".join(out)


def _crypt_module() -> Any:
    """The ``crypt(3)`` binding: the standard library's ``crypt`` (Python < 3.13, deprecated) or
    the ``crypt-r`` package (its maintained copy, for Python 3.13+); None without either."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt

            return crypt
        except ImportError:
            pass
    try:
        import crypt_r  # type: ignore[import-not-found, unused-ignore]

        return crypt_r
    except ImportError:
        return None


@dataclass(frozen=True)
class Credential:
    user: str
    stored: str  # the plain password (OBF: decoded), MD5:<hex> or CRYPT:<hash>
    roles: tuple[str, ...] = ()

    def check(self, password: str) -> bool:
        if self.stored.startswith("MD5:"):
            digest = hashlib.md5(password.encode("utf-8"), usedforsecurity=False).hexdigest()  # Jetty's MD5:
            return hmac.compare_digest(digest, self.stored[4:].strip().lower())
        if self.stored.startswith("CRYPT:"):
            cooked = self.stored[6:].strip()
            mod = _crypt_module()
            got = mod.crypt(password, cooked) if mod is not None else None
            return got is not None and hmac.compare_digest(got, cooked)
        return hmac.compare_digest(self.stored.encode(), password.encode())

    @property
    def may_write(self) -> bool:
        return not self.roles or bool(WRITE_ROLES & set(self.roles))


def load_realm(path: str) -> dict[str, Credential]:
    """The users of a realm file. Raises ValueError (a bad line, an unusable credential) or
    OSError."""
    users: dict[str, Credential] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            user, sep, rest = line.partition(":")
            parts = [p.strip() for p in rest.split(",")]
            password, roles = parts[0], tuple(p for p in parts[1:] if p)
            if not sep or not user.strip():
                raise ValueError(f"{path}:{n}: expected 'user: password[,role ...]'")
            if password.startswith("OBF:"):
                try:
                    password = deobfuscate(password)
                except ValueError as e:
                    raise ValueError(f"{path}:{n}: {e}") from None
            elif password.startswith("MD5:"):
                hexd = password[4:].strip()
                if len(hexd) != 32 or any(c not in "0123456789abcdefABCDEF" for c in hexd):
                    raise ValueError(f"{path}:{n}: MD5: needs 32 hex digits")
            elif password.startswith("CRYPT:"):
                if _crypt_module() is None:
                    raise ValueError(
                        f"{path}:{n}: CRYPT: passwords need crypt(3): the crypt module (Python < 3.13) "
                        "or the crypt-r package"
                    )
                if len(password) < 6 + 13:
                    raise ValueError(f"{path}:{n}: CRYPT: needs a crypt(3) hash")
            users[user.strip()] = Credential(user.strip(), password, roles)
    if not users:
        raise ValueError(f"{path}: no users")
    return users


def authenticate(authorization: str, users: dict[str, Credential]) -> Credential | None:
    """The user of an ``Authorization: Basic ...`` header whose password checks, else None."""
    kind, _, cred = authorization.partition(" ")
    if kind.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(cred.strip(), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    c = users.get(user)
    if not sep or c is None or not c.check(password):
        return None
    return c
