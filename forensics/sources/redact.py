"""Redaction of raw evidence bytes kept in the case: prompt and response text never stored.

Loaded rows keep metadata only; a line that could not be loaded is kept in ``rejected_lines`` with
its raw bytes so a responder can see why. Those bytes may hold a prompt (a LiteLLM ``messages``
column, an AI Gateway body, a request log cut mid-prompt): everything from the first key that
carries prompt or response text (or a secret) on is replaced by a marker. One rule, applied by
every loader to every raw line it keeps (Python :func:`redact_raw`, SQL :data:`REDACT_SQL_MACRO`).

Example:
    >>> redact_raw(b'{"request_id": "r1", "messages": [{"role": "user", "content": "secret"}]}')
    b'{"request_id": "r1", "messages": <redacted: rest of line>'
"""

from __future__ import annotations

import re

#: Keys whose values are prompt or response text, or secrets.
TEXT_KEYS = (
    "messages", "prompt", "prompts", "input", "inputs", "content", "text", "response", "responses",
    "completion", "choices", "output", "outputs", "body", "RequestBody", "ResponseBody", "request_body",
    "response_body", "input_ids", "output_ids", "input_embeds", "request_parameters", "system",
    "api_key", "authorization", "cookie", "x-api-key", "password", "secret", "access_token", "hf_token",
)

#: A text-carrying key followed by its separator (JSON ``"k":``, Python ``k=`` / ``'k':``, CSV header
#: names do not match: they have no separator after them).
REDACT_PATTERN = r"""(?i)(^|[^\w\-])["'\\]*(""" + "|".join(re.escape(k) for k in TEXT_KEYS) + r""")["'\\]*\s*[:=]"""

_RE = re.compile(REDACT_PATTERN.encode())

MARKER = b" <redacted: rest of line>"

#: DuckDB macro ``gw_redact(text)``: the same rule in SQL, for raw lines moved by a query.
REDACT_SQL_MACRO = (
    "CREATE OR REPLACE TEMP MACRO gw_redact(x) AS CASE WHEN regexp_matches(x, '"
    + REDACT_PATTERN.replace("'", "''")
    + "') THEN regexp_replace(x, '^(.*?"
    + REDACT_PATTERN.replace("(?i)", "").replace("'", "''")
    + ").*$', '\\1" + MARKER.decode() + "', 'is') ELSE x END"
)


def redact_csv_row(raw: bytes, header: list[str], delim: str = ",") -> bytes:
    """A CSV row cut at the first field whose column carries text (a prompt column, say).

    The row may be malformed (that is why it was rejected): fields are found by a quote-aware
    scan, and if the text column is never reached the row is cut where its last field starts.

    Example:
        >>> redact_csv_row(b'r1,team-a,"Hello, my secret prompt",3', ["request_id", "team_id", "messages", "n"])
        b'r1,team-a, <redacted: rest of line>'
    """
    text_cols = [i for i, h in enumerate(header) if h.strip().strip('"').lower() in _TEXT_KEYS_LOWER]
    raw = redact_raw(raw)
    if not text_cols:
        return raw
    target = text_cols[0]
    d = delim.encode()[0]
    field, quoted, start = 0, False, 0
    for i, b in enumerate(raw):
        if b == 0x22:  # '"'
            quoted = not quoted
        elif b == d and not quoted:
            field += 1
            start = i + 1
            if field == target:
                return raw[:start] + MARKER
    return raw[:start] + MARKER if field < target and start < len(raw) else raw


_TEXT_KEYS_LOWER = {k.lower() for k in TEXT_KEYS}


def redact_raw(raw: bytes) -> bytes:
    """``raw`` up to the first prompt-, response- or secret-carrying key, then a marker.

    Example:
        >>> redact_raw(b"Receive: obj=GenerateReqInput(rid='a', text='PROMPT")
        b"Receive: obj=GenerateReqInput(rid='a', text= <redacted: rest of line>"
        >>> redact_raw(b'{"RayID": "x", "EdgeResponseContentType": "text/event-stream"}')
        b'{"RayID": "x", "EdgeResponseContentType": "text/event-stream"}'
    """
    m = _RE.search(raw)
    if m is None:
        return raw
    return raw[: m.end()] + MARKER
