"""Kafka's JAAS login-module text (``sasl.jaas.config``), parsed once for the broker and the
client: ``<LoginModule class> <flag> name=value ... ;``.

Values may be double-quoted (``\\`` escapes the next character) or bare words; the trailing ``;``
is required, and there is exactly one login module, as Kafka requires.

Error contract: :class:`JaasError` (a ``ValueError``) naming the config key and the position
(the option before the error), never a token: any value may be a password. The broker turns it
into a ``ConfigError``, the client into a ``SecurityConfigError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["JAAS_FLAGS", "JaasEntry", "JaasError", "parse_jaas"]

JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")
_USAGE = 'e.g. org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="<password>";'


class JaasError(ValueError):
    """Malformed JAAS text; the message holds no part of the text."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's users on a broker: ``user_<name>="<password>"`` options."""
        return {k[len("user_") :]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def _tokens(text: str, key: str) -> list[tuple[str, bool]]:
    """(text, quoted) tokens: words, quoted values, ``=`` and ``;``."""
    pos, n = 0, len(text)
    tokens: list[tuple[str, bool]] = []
    while pos < n:
        ch = text[pos]
        if ch.isspace():
            pos += 1
        elif ch in "=;":
            tokens.append((ch, False))
            pos += 1
        elif ch == '"':
            pos += 1
            buf: list[str] = []
            while True:
                if pos >= n:
                    raise JaasError(f"{key}: cannot parse an unterminated quoted value")
                c = text[pos]
                if c == "\\" and pos + 1 < n:
                    buf.append(text[pos + 1])
                    pos += 2
                elif c == '"':
                    pos += 1
                    break
                else:
                    buf.append(c)
                    pos += 1
            tokens.append(("".join(buf), True))
        else:
            start = pos
            while pos < n and not text[pos].isspace() and text[pos] not in '=;"':
                pos += 1
            tokens.append((text[start:pos], False))
    return tokens


def parse_jaas(text: str, key: str = "sasl.jaas.config") -> JaasEntry:
    """Parse one JAAS login-module entry; ``key`` names the config in errors."""
    tokens = _tokens(text, key)
    if len(tokens) < 3 or tokens[0][1] or tokens[0][0] in "=;":
        raise JaasError(f"{key}: expected <LoginModule class> <flag> [name=value ...]; ({_USAGE})")
    if tokens[-1] != (";", False):
        raise JaasError(f"{key}: a JAAS entry must end with ';' ({_USAGE})")
    module, (flag, flag_quoted) = tokens[0][0], tokens[1]
    if flag_quoted or flag.lower() not in JAAS_FLAGS:
        raise JaasError(
            f"{key}: the word after the login module class must be a login module control flag: "
            f"one of {', '.join(JAAS_FLAGS)}"
        )
    options: dict[str, str] = {}
    last: str | None = None  # the option before the current position
    i = 2
    while tokens[i] != (";", False):
        name, quoted = tokens[i]
        if quoted or name == "=" or i + 2 >= len(tokens) or tokens[i + 1] != ("=", False):
            where = f"after option {last!r}" if last is not None else "after the login module flag"
            raise JaasError(f"{key}: expected key=value {where} ({_USAGE})")
        value, vquoted = tokens[i + 2]
        if not vquoted and value in "=;":
            raise JaasError(f"{key}: option {name!r} has no value")
        options[name] = value
        last = name
        i += 3
    if i != len(tokens) - 1:
        raise JaasError(f"{key}: exactly one login module per JAAS config ({_USAGE})")
    return JaasEntry(module, flag.lower(), options)
