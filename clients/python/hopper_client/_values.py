"""Checking what a caller gives before it is sent: the protocol's values are JSON-compatible
(no CBOR tags: docs/protocol.md §2), its text UTF-8, its instants RFC 3339 text with a zone
and its durations bounded, so a bad value is a clear local error instead of the server's
refusal or the encoder's (or, for a log line or an error text, a value made sendable
instead of a lost batch or a lost outcome)."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Dict, Mapping, Optional

#: The longest duration the server takes (``delay_ms``, ``by_ms``, ``retry_in_ms``): ten
#: years of 365 days, in milliseconds (docs/protocol.md §3, "Ranges").
MAX_DURATION_MS = 315_360_000_000
#: The integers a JSON number of the protocol may hold: signed or unsigned 64-bit.
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1
#: How deep a value may nest (the server refuses a frame nesting deeper than 256 levels,
#: the message's own maps included).
_MAX_DEPTH = 200
#: Past this depth, a log field's value is written as its ``str()``.
_MAX_LOG_DEPTH = 32

_JSON_TYPES = "maps with text keys, lists, text, numbers, booleans and None"

#: A surrogate code point (U+D800 to U+DFFF): Python text may hold one (bytes decoded with
#: ``errors="surrogateescape"``, as ``os.fsdecode`` does, leave U+DC80 to U+DCFF), but UTF-8,
#: and so the protocol's CBOR, cannot encode it. Python's text is code points, so it is
#: always lone: ``"\ud83d\ude00"`` is two of them, not ``"\U0001f600"``.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so that UTF-8 can encode it."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def _encodable(text: str, what: str) -> str:
    """``text`` if it holds no lone surrogate; ValueError naming ``what`` and where
    otherwise."""
    found = None if text.isascii() else _SURROGATE.search(text)
    if found is not None:
        raise ValueError(f"{what} holds a lone surrogate {found.group()!r} at index"
                         f" {found.start()}, which UTF-8 cannot encode (bytes decoded with"
                         " errors='surrogateescape', as file names are, hold such)")
    return text


def _type_name(value: Any) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def json_value(value: Any, what: str) -> Any:
    """``value`` as plain JSON-compatible data (dicts, lists, str, int, float, bool, None),
    or TypeError/ValueError naming the first part of ``what`` that is not: a datetime, UUID,
    set, Decimal, bytes..., a non-text key, NaN or an infinity, an integer out of 64 bits,
    text or a key holding a lone surrogate."""
    return _json(value, what, 0)


def _json(value: Any, path: str, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _encodable(value, path)
    if isinstance(value, int):
        if not _MIN_INT <= value <= _MAX_INT:
            raise ValueError(f"{path}: the integer {value} does not fit in 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value} is not a JSON number (no NaN nor infinity)")
        return value
    if isinstance(value, (Mapping, list, tuple)) and depth >= _MAX_DEPTH:
        where = path if len(path) <= 80 else path[:80] + "..."
        raise ValueError(f"{where} nests deeper than {_MAX_DEPTH} levels (or holds itself)")
    if isinstance(value, Mapping):
        plain: Dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: the key {key!r} is of type {_type_name(key)};"
                                " JSON keys are text")
            _encodable(key, f"{path}: the key {key!r}")
            plain[key] = _json(item, f"{path}[{key!r}]", depth + 1)
        return plain
    if isinstance(value, (list, tuple)):
        return [_json(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    raise TypeError(f"{path} is of type {_type_name(value)}, which is not JSON-compatible"
                    f" ({_JSON_TYPES});"
                    " convert it first (a datetime or UUID to a str, say)")


def safe_str(value: Any) -> str:
    """``str(value)`` made well-formed (see :func:`well_formed`), or a placeholder when its
    ``__str__`` raises."""
    try:
        return well_formed(str(value))
    except Exception:  # noqa: BLE001 - a broken __str__ must not make a log line raise
        return f"<{_type_name(value)} that cannot be shown: its __str__ raised>"


def loggable(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` that is JSON-compatible and UTF-8 can encode, every value that is
    not a JSON type (or not a finite, 64-bit number) replaced by its ``str()``, every key by
    its ``str()``, lone surrogates in text and keys by U+FFFD (see :func:`well_formed`);
    nesting past 32 levels is shown as ``str()`` too. Never raises."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, int):
        return value if _MIN_INT <= value <= _MAX_INT else safe_str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else safe_str(value)
    if depth >= _MAX_LOG_DEPTH:
        return safe_str(value)
    try:
        if isinstance(value, Mapping):
            return {well_formed(k) if isinstance(k, str) else safe_str(k): loggable(v, depth + 1)
                    for k, v in list(value.items())}
        if isinstance(value, (list, tuple)):
            return [loggable(v, depth + 1) for v in list(value)]
    except Exception:  # noqa: BLE001 - a container that fails to iterate is shown as text
        pass
    return safe_str(value)


def rfc3339(value: Any, what: str) -> str:
    """An instant as RFC 3339 text: a timezone-aware ``datetime``, or text passed as is.
    A naive datetime (its zone would be a guess) or text that UTF-8 cannot encode is
    ValueError; anything else TypeError."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{what} must be a timezone-aware datetime"
                             f" (datetime.now(timezone.utc), say), not the naive"
                             f" {value.isoformat()}")
        return value.isoformat()
    if isinstance(value, str):
        return _encodable(value, what)
    raise TypeError(f"{what} must be a timezone-aware datetime or RFC 3339 text, not of"
                    f" type {_type_name(value)}")


def integer(value: Any, what: str, low: int, high: int) -> int:
    """``value`` if it is an int (not a bool) from ``low`` to ``high``; TypeError or
    ValueError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not of type {_type_name(value)}")
    if not low <= value <= high:
        raise ValueError(f"{what} must be from {low:,} to {high:,}, got {value:,}")
    return value


def seconds_ms(seconds: Any, what: str, minimum_ms: int = 0) -> int:
    """A duration in seconds (int or float) as the protocol's milliseconds: finite, from
    ``minimum_ms`` to ten years (the server's bound). TypeError or ValueError naming
    ``what`` otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not of type {_type_name(seconds)}")
    if not math.isfinite(seconds):
        raise ValueError(f"{what} must be a finite number of seconds, got {seconds}")
    if not minimum_ms / 1000 <= seconds <= MAX_DURATION_MS / 1000:
        raise ValueError(f"{what} must be from {minimum_ms / 1000:g} s to"
                         f" {MAX_DURATION_MS // 1000:,} s (ten years), got {seconds} s")
    return int(seconds * 1000)


def text(value: Any, what: str) -> str:
    """``value`` if it is text that UTF-8 can encode; TypeError (not a str) or ValueError (a
    lone surrogate) naming ``what`` otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not of type {_type_name(value)}")
    return _encodable(value, what)


def optional_str(value: Optional[Any], what: str) -> Optional[str]:
    """``value`` if it is None or :func:`text`; TypeError or ValueError naming ``what``
    otherwise."""
    return None if value is None else text(value, what)
