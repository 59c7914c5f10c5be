"""Redaction and capping of every text the engine loader stores.

Prompt and output carriers (``text=``, ``input_ids=``, ``'text':``, ``messages``, ``content``,
``prompt``, ``request_parameters``, ...) and secrets (``api_key``, ``*_token``, ``password``,
``authorization``, ``cookie``, ...) are replaced by ``<redacted>`` in any stored text: other
lines, startup facts (rejected raw bytes: :func:`forensics.sources.redact.redact_raw`,
the rule every loader shares). The patterns are RE2 (pyarrow's regex engine,
the same as DuckDB's), behind a capture-free guard that most lines fail at once.

Example:
    >>> import pyarrow as pa
    >>> redact_text(pa.array(["x text='secret prompt', rid=1", "plain"])).to_pylist()
    ['x text=<redacted>, rid=1', 'plain']
    >>> cap_text(pa.array(["é" * 1000])).to_pylist()[0] == "é" * 1000
    True
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

#: A Python string literal as repr() prints it (either quote style, backslash escapes).
LIT = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\""""

#: Prompt/output carriers that must never reach the case database.
REDACT_RE = (
    r"""((?:^|[\s,({])(?:text|input_ids|output_ids|input_embeds|prompt|messages|content|request_parameters)=|"""
    r"""['"](?:text|input_ids|output_ids|prompt|messages|content|request_parameters)['"]: ?)"""
    r"""(?:""" + LIT + r"""|['"].*$|\[[^\]]*\]?|[^,)}]*)"""
)
#: Secrets that a server_args line or a header may carry.
SECRET_RE = (
    r"""((?:^|[^\w\-])['"]?(?:api_key|admin_api_key|hf_token|access_token|auth_token|password|secret|"""
    r"""authorization|cookie|x-api-key)['"]?(?:=|: ?))(?:""" + LIT + r"""|[^,)}\s]*)"""
)
#: Every word REDACT_RE or SECRET_RE needs: a capture-free check (one DFA pass) before them.
REDACT_GUARD_RE = (
    r"text|input_ids|output_ids|input_embeds|prompt|messages|content|request_parameters|api_key|api-key|"
    r"hf_token|access_token|auth_token|password|secret|authorization|cookie"
)

#: Characters kept of a stored text line (when it is longer than this many bytes).
TEXT_CAP = 1024


def redact_text(arr: pa.Array) -> pa.Array:
    """Every carrier value and secret of each string replaced by ``<redacted>``."""
    if len(arr) == 0:
        return arr
    guard = pc.fill_null(pc.match_substring_regex(arr, REDACT_GUARD_RE), False)
    if not pc.any(guard).as_py():
        return arr
    hit = arr.filter(guard)
    fixed = pc.replace_substring_regex(pc.replace_substring_regex(hit, REDACT_RE, r"\1<redacted>"),
                                       SECRET_RE, r"\1<redacted>")
    # put the fixed values back in place: the k-th guarded row takes the k-th fixed value
    pos = pc.subtract(pc.cumulative_sum(pc.cast(guard, pa.int64())), 1)
    take = pc.if_else(guard, pos, pa.scalar(0, pa.int64()))
    return pc.if_else(guard, pc.take(fixed, take), arr)


def cap_text(arr: pa.Array) -> pa.Array:
    """Strings longer than TEXT_CAP bytes cut to their first TEXT_CAP characters."""
    if len(arr) == 0:
        return arr
    long = pc.fill_null(pc.greater(pc.binary_length(arr), TEXT_CAP), False)
    if not pc.any(long).as_py():
        return arr
    return pc.if_else(long, pc.utf8_slice_codeunits(arr, 0, TEXT_CAP), arr)
