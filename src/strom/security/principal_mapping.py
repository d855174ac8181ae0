"""``ssl.principal.mapping.rules``: Kafka's ``SslPrincipalMapper`` (KIP-371).

A mutual-TLS client's principal is ``User:`` + a name mapped from its certificate's subject DN
(RFC 2253, as :func:`strom.security.tls.format_dn` prints it). The rules are tried in order; the
first that applies gives the name:

- ``DEFAULT``: the DN unchanged;
- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash (lower- or
  upper-case the result): applies when the Java regular expression ``pattern`` matches the
  whole DN; the name is the DN with every match replaced by ``replacement`` (``$1`` names a
  group).

Rules are separated by commas or newlines (a comma inside a pattern belongs to it: a rule ends
at its third slash and flag). No rule applying is an authentication failure, as in Kafka
("No rules apply to <DN>"). Java and Python regular expressions agree on what such rules use
(classes, groups, lazy quantifiers, anchors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NoRuleAppliesError", "PrincipalMappingError", "SslPrincipalMapper"]


class PrincipalMappingError(ValueError):
    """Malformed ``ssl.principal.mapping.rules``."""


class NoRuleAppliesError(ValueError):
    """No rule maps this DN (the connection's authentication fails)."""


# one rule and its separator, as Kafka's RULE_SPLITTER: DEFAULT, RULE:pattern/replacement/[LU],
# or anything else (refused)
_SPLITTER = re.compile(
    r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)[^,\n]*?|(.*?))\s*(?:[,\n]\s*|$)"
)
_BACKREF = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


class SslPrincipalMapper:
    def __init__(self, rules: str | None = "DEFAULT") -> None:
        self.text = (rules or "DEFAULT").strip() or "DEFAULT"
        self.rules = self._parse(self.text)

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        out: list[_Rule] = []
        pos = 0
        while pos < len(text):
            m = _SPLITTER.match(text, pos)
            if m is None or m.end() == pos:
                raise PrincipalMappingError(f"Invalid rule: {text[pos:]}")
            pos = m.end()
            whole, pattern, replacement, case, other = m.group(1, 2, 3, 4, 5)
            if other is not None and other != "":
                raise PrincipalMappingError(f"Invalid rule: {other}")
            if whole == "DEFAULT":
                out.append(_Rule(None))
            elif whole:
                try:
                    compiled = re.compile(pattern)
                except re.error as e:
                    raise PrincipalMappingError(f"Invalid rule: {whole}: {e}") from None
                # Java's $1 -> Python's \g<1>; a backslash escapes the next character in both
                repl = _BACKREF.sub(lambda g: "\\g<" + g.group(1) + ">", replacement)
                out.append(_Rule(compiled, repl, case or ""))
        if not out:
            raise PrincipalMappingError("no rules")
        return out

    def name(self, dn: str) -> str:
        """The principal name for a subject DN (raises NoRuleAppliesError)."""
        for rule in self.rules:
            try:
                result = rule.apply(dn)
            except (re.error, IndexError) as e:  # a replacement naming a group the pattern lacks
                raise NoRuleAppliesError(f"rule failed on {dn}: {e}") from None
            if result is not None:
                return result
        raise NoRuleAppliesError(f"No rules apply to {dn}, rules {self.text}")
