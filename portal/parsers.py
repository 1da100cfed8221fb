"""The API's JSON parser: DRF's, plus two refusals before any view sees the body.

* Depth. ``json`` decodes arrays and objects recursively; a 2 kB body nested 1,000 deep ran it
  out of stack (RecursionError: a 500, for anyone, the token endpoint included). The body is
  scanned for its nesting depth first, without recursion, and refused past
  :data:`MAX_DEPTH`: no request to Allot nests more than a few levels.
* Lone surrogates. ``"\\ud800"`` is valid JSON but no character: UTF-8 cannot hold it, so the
  response that echoes it, the database row that stores it (SQLite keeps it, then every read of
  the list fails) or the log line that prints it breaks. Refused wherever it appears, a key or a
  value, naming the top-level field it sits under.

Both answer 400 as ``{"message", "field"}`` like every other API error (portal.api).
"""

from __future__ import annotations

import codecs

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json

MAX_DEPTH = 32


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in a JSON text, brackets inside strings skipped."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def field_with_lone_surrogate(data) -> str | None:
    """The top-level field whose key or value (at any depth) holds a lone surrogate; "body"
    when the body itself is one string, or a top-level key is at fault."""
    if isinstance(data, dict):
        for key, value in data.items():
            if has_lone_surrogate(key):
                return "body"
            if _holds_lone_surrogate(value):
                return key
        return None
    return "body" if _holds_lone_surrogate(data) else None


def _holds_lone_surrogate(value) -> bool:
    pending = [value]  # a stack, not recursion: the depth is bounded, but keep it so anyway
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


class SafeJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = get_encoding(parser_context or {})  # text codecs only (no bz2 bombs)
        try:
            text = codecs.getreader(encoding)(stream).read()
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        if nesting_depth(text) > MAX_DEPTH:
            raise ParseError(f"JSON parse error - nested too deep (at most {MAX_DEPTH} levels)")
        try:
            parse_constant = json.strict_constant if self.strict else None
            data = json.loads(text, parse_constant=parse_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        field = field_with_lone_surrogate(data)
        if field is not None:
            raise ValidationError({field: ["a lone surrogate (\\ud800-\\udfff) is no character"]})
        return data
