"""Java's ``SimpleDateFormat`` patterns (as TimestampRouter and TimestampConverter take them),
formatting and parsing in UTC.

Supported letters: ``y`` (year; ``yy`` two digits), ``M`` (month: ``M``/``MM`` number, ``MMM``
short name, ``MMMM`` full name), ``d``, ``H``, ``k``, ``h``, ``K``, ``m``, ``s``, ``S``
(milliseconds), ``a`` (AM/PM), ``E`` (day name), ``D`` (day in year), ``Z`` (``+0000``), ``X``
(``Z``/``+00``/``+0000``/``+00:00``), ``z`` (``UTC``), ``'quoted'`` literals and ``''``.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from functools import lru_cache

from strom.connect.data import ConfigError, DataException

_LETTERS = "yMdHkhKmsSaEDZXzGuwWF"
_SUPPORTED = set("yMdHkhKmsSaEDZXz")

Token = tuple[str, str]  # ("lit", text) or (letter, run)


@lru_cache(maxsize=64)
def tokenize(pattern: str) -> tuple[Token, ...]:
    out: list[Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "'":
            j = pattern.find("'", i + 1)
            if j == i + 1:  # '' is a quote
                out.append(("lit", "'"))
                i += 2
                continue
            if j < 0:
                raise ConfigError(f"Unterminated quote in date format pattern {pattern!r}")
            out.append(("lit", pattern[i + 1 : j].replace("''", "'")))
            i = j + 1
        elif c.isascii() and c.isalpha():
            j = i
            while j < n and pattern[j] == c:
                j += 1
            if c not in _SUPPORTED:
                raise ConfigError(f"Unsupported pattern letter {c!r} in date format {pattern!r}")
            out.append((c, pattern[i:j]))
            i = j
        else:
            out.append(("lit", c))
            i += 1
    return tuple(out)


def check(pattern: str) -> None:
    tokenize(pattern)


def _num(v: int, width: int) -> str:
    return str(v).zfill(width)


def format_ms(pattern: str, ms: int) -> str:
    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    out = []
    for kind, run in tokenize(pattern):
        w = len(run)
        if kind == "lit":
            out.append(run)
        elif kind == "y":
            out.append(_num(t.year % 100, 2) if w == 2 else _num(t.year, w))
        elif kind == "M":
            if w >= 4:
                out.append(calendar.month_name[t.month])
            elif w == 3:
                out.append(calendar.month_abbr[t.month])
            else:
                out.append(_num(t.month, w))
        elif kind == "d":
            out.append(_num(t.day, w))
        elif kind == "D":
            out.append(_num(t.timetuple().tm_yday, w))
        elif kind == "H":
            out.append(_num(t.hour, w))
        elif kind == "k":
            out.append(_num(t.hour or 24, w))
        elif kind == "h":
            out.append(_num(t.hour % 12 or 12, w))
        elif kind == "K":
            out.append(_num(t.hour % 12, w))
        elif kind == "m":
            out.append(_num(t.minute, w))
        elif kind == "s":
            out.append(_num(t.second, w))
        elif kind == "S":
            out.append(_num(t.microsecond // 1000, w))
        elif kind == "a":
            out.append("AM" if t.hour < 12 else "PM")
        elif kind == "E":
            out.append(calendar.day_name[t.weekday()] if w >= 4 else calendar.day_abbr[t.weekday()])
        elif kind == "Z":
            out.append("+0000")
        elif kind == "X":
            out.append("Z")
        elif kind == "z":
            out.append("UTC")
    return "".join(out)


@lru_cache(maxsize=64)
def _parser(pattern: str) -> re.Pattern[str]:
    parts = []
    for kind, run in tokenize(pattern):
        w = len(run)
        if kind == "lit":
            parts.append(re.escape(run))
        elif kind in "yMdDHkhKmsS" and not (kind == "M" and w >= 3):
            parts.append(
                f"(?P<{kind}>\\d{{{w}}})"
                if (w > 1 and kind != "y") or (kind == "y" and w == 2)
                else f"(?P<{kind}>\\d+)"
            )
        elif kind == "M":
            parts.append("(?P<Mname>[A-Za-z]+)")
        elif kind == "a":
            parts.append("(?P<a>[AaPp][Mm])")
        elif kind == "E":
            parts.append("[A-Za-z]+")
        elif kind in "ZXz":
            parts.append("(?P<tz>Z|UTC|GMT|[+-]\\d{2}(?::?\\d{2})?)")
    return re.compile("".join(parts))


def parse_ms(pattern: str, text: str) -> int:
    """Parses ``text`` with ``pattern`` (as ``SimpleDateFormat.parse`` in UTC: a prefix match)."""
    m = _parser(pattern).match(text)
    if not m:
        raise DataException(f"Could not parse timestamp: value ({text}) does not match pattern ({pattern})")
    g = m.groupdict()
    year = int(g["y"]) if g.get("y") else 1970
    if g.get("y") and len(g["y"]) == 2:
        year += 2000 if year < 80 else 1900  # SimpleDateFormat: within 80 years before / 20 after now
    month = 1
    if g.get("M"):
        month = int(g["M"])
    elif g.get("Mname"):
        names = [n.lower() for n in calendar.month_name]
        abbrs = [n.lower() for n in calendar.month_abbr]
        low = g["Mname"].lower()
        month = names.index(low) if low in names else abbrs.index(low) if low in abbrs else 0
        if not month:
            raise DataException(f"Could not parse timestamp: unknown month {g['Mname']!r}")
    hour = int(g.get("H") or g.get("k") or g.get("h") or g.get("K") or 0)
    if g.get("k") and hour == 24:
        hour = 0
    if g.get("a"):
        pm = g["a"].lower() == "pm"
        hour = hour % 12 + (12 if pm else 0)
    try:
        if g.get("D"):
            base = dt.datetime(year, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=int(g["D"]) - 1)
        else:
            base = dt.datetime(year, month, int(g.get("d") or 1), tzinfo=dt.UTC)
        t = base.replace(hour=hour, minute=int(g.get("m") or 0), second=int(g.get("s") or 0))
    except ValueError as e:
        raise DataException(f"Could not parse timestamp: value ({text}): {e}") from None
    ms = (t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
    ms += int(g.get("S") or 0)
    tz = g.get("tz")
    if tz and tz not in ("Z", "UTC", "GMT"):
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        off = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) >= 4 else 0)
        ms -= sign * off * 60_000
    return ms
