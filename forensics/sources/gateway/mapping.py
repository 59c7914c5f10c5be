"""Users' TOML mapping files: a format the presets do not know, described field by field.

Example:
    >>> spec = load_mapping_text('[columns]\\nts_start = "time"\\nrequest_id = "$.req.id"', "m.toml")
    >>> spec.columns["request_id"].fields
    ('$.req.id',)
"""

from __future__ import annotations

import functools
import re
import threading
import tomllib
from pathlib import Path
from typing import Any

from forensics.errors import MappingError
from forensics.sources.gateway.spec import CONTAINERS, MAPPABLE_COLUMNS, UNITS, Col, Spec

_COL_KEYS = {"field", "fields", "regex", "group", "map", "default", "unit", "format", "sql", "extra_fields"}

_GATEWAY_KEYS = ("name", "layer", "description", "container", "line_regex", "tz", "required", "signature", "keep",
                 "keep_reason")


@functools.cache
def _parser() -> Any:
    # one in-memory database for every check of the process: a new one costs ~40 ms, ten checks
    # (the shipped presets, at import) half a second of every command's start
    import duckdb

    return duckdb.connect()


_PARSER_LOCK = threading.Lock()


def check_sql(expr: str, where: str, what: str) -> None:
    """Refuse a mapping's SQL unless it is one scalar expression over its record's fields.

    ``{v}`` is the column's value, ``{f:<field>}`` another field's text; no subquery, no table
    function, no second statement (a mapping file must not read other files or change the case).

    Example:
        >>> check_sql("lower({v})", "m.toml", "sql")
        >>> check_sql("(SELECT 1 FROM read_text('/etc/passwd'))", "m.toml", "sql")
        Traceback (most recent call last):
        ...
        forensics.errors.MappingError: m.toml: sql must be one expression over the record's fields, not a query (use {v}, {f:<field>}, functions and operators)
    """
    import json

    refs = sorted(set(re.findall(r"\{f:([^}]+)\}", expr)))
    body = re.sub(r"\{f:([^}]+)\}", lambda m: f"f{refs.index(m.group(1))}", expr).replace("{v}", "v")
    hint = "use {v}, {f:<field>}, functions and operators"
    if ";" in body or "{" in body or "}" in body:
        raise MappingError(f"{what} must be one expression over the record's fields", where=where, hint=hint)
    with _PARSER_LOCK:
        con = _parser().cursor()
        try:
            tree = json.loads(con.execute("SELECT json_serialize_sql($q)", {"q": f"SELECT ({body}) FROM t"}).fetchall()[0][0])
        finally:
            con.close()
    if tree.get("error") or len(tree.get("statements", [])) != 1:
        raise MappingError(f"{what} is not valid SQL: {tree.get('error_message', 'several statements')}",
                           where=where, hint=hint)
    node = tree["statements"][0]["node"]
    if node.get("from_table", {}).get("type") != "BASE_TABLE" or "SUBQUERY" in json.dumps(node["select_list"]) \
            or "TABLE_FUNCTION" in json.dumps(node["select_list"]):
        raise MappingError(f"{what} must be one expression over the record's fields, not a query",
                           where=where, hint=hint)


def _col_from_toml(name: str, value: Any, where: str) -> Col:
    if isinstance(value, str):
        return Col(fields=(value,))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return Col(fields=tuple(value))
    if not isinstance(value, dict):
        raise MappingError(f"column {name!r} must be a field name, a list of fields or a table",
                           where=where, hint='e.g. request_id = "$.req.id"')
    unknown = set(value) - _COL_KEYS
    if unknown:
        raise MappingError(f"column {name!r} has unknown keys {sorted(unknown)}", where=where,
                           hint=f"allowed: {', '.join(sorted(_COL_KEYS))}")
    fields = value.get("fields", value.get("field"))
    if isinstance(fields, str):
        fields = [fields]
    if not fields or not all(isinstance(f, str) for f in fields):
        raise MappingError(f"column {name!r} needs 'field' (or 'fields')", where=where,
                           hint='e.g. tenant_id = { field = "$.headers.x-tenant" }')
    regex = value.get("regex")
    if regex is not None:
        try:
            compiled = re.compile(regex)
        except re.error as exc:
            raise MappingError(f"column {name!r}: invalid regex {regex!r}: {exc}", where=where) from exc
        if "'" in regex:
            raise MappingError(f"column {name!r}: regex may not contain a single quote", where=where)
    unit = value.get("unit")
    if unit is not None and unit not in UNITS:
        raise MappingError(f"column {name!r}: unit must be one of {', '.join(UNITS)}", where=where)
    mapping = value.get("map")
    if mapping is not None and not isinstance(mapping, dict):
        raise MappingError(f"column {name!r}: map must be a table of value = replacement", where=where)
    group = int(value.get("group", 1 if regex is None or compiled.groups else 0))
    sql = value.get("sql")
    if sql is not None:
        if not isinstance(sql, str):
            raise MappingError(f"column {name!r}: sql must be a string", where=where)
        check_sql(sql, where, "sql")
    extra = value.get("extra_fields", [])
    if isinstance(extra, str):
        extra = [extra]
    if not isinstance(extra, list) or not all(isinstance(f, str) for f in extra):
        raise MappingError(f"column {name!r}: extra_fields must be a list of fields", where=where)
    return Col(
        fields=tuple(fields),
        regex=regex,
        group=group,
        values={str(k): str(v) for k, v in mapping.items()} if mapping else None,
        default=None if value.get("default") is None else str(value["default"]),
        unit=unit,
        format=value.get("format"),
        sql=sql,
        # the fields an sql step reads ({f:<field>}) are read too, whether listed or not
        extra_fields=tuple(dict.fromkeys([*extra, *re.findall(r"\{f:([^}]+)\}", sql or "")])),
    )


def load_mapping_text(text: str, name: str, *, preset: bool = False) -> Spec:
    """Compile the text of a TOML mapping file into a :class:`Spec` (the presets are such files too).

    ``preset``: the file is one of the shipped presets (its ``[gateway] name`` is its name; else
    the spec is named ``mapping:<file>``).

    Example:
        >>> spec = load_mapping_text('''
        ... [gateway]
        ... layer = "proxy"
        ... signature = [["started"], ["consumer"]]
        ... [columns]
        ... ts_start = { field = "started", unit = "ms" }
        ... tenant_id = { field = "$.consumer.username", regex = "^team-(.*)$" }
        ... model = { field = "model", sql = "lower({v})" }
        ... ''', "kong.toml")
        >>> spec.layer, spec.columns["tenant_id"].regex, spec.signature
        ('proxy', '^team-(.*)$', (('started',), ('consumer',)))
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MappingError(f"not valid TOML: {exc}", where=name, hint="check the mapping file's syntax") from exc
    unknown = set(doc) - {"gateway", "columns"}
    if unknown:
        raise MappingError(f"unknown sections {sorted(unknown)}", where=name,
                           hint="a mapping has a [gateway] table and a [columns] table")
    gw = doc.get("gateway", {})
    cols = doc.get("columns")
    if not isinstance(cols, dict) or not cols:
        raise MappingError("missing [columns] table", where=name,
                           hint='map canonical columns to fields, e.g. ts_start = "time"')
    bad = set(cols) - set(MAPPABLE_COLUMNS)
    if bad:
        raise MappingError(f"unknown canonical columns {sorted(bad)}", where=name,
                           hint=f"allowed: {', '.join(MAPPABLE_COLUMNS)}")
    if "ts_start" not in cols and "ts_end" not in cols:
        raise MappingError("a mapping needs ts_start or ts_end", where=name,
                           hint='add e.g. ts_start = "timestamp"')
    gw_unknown = set(gw) - set(_GATEWAY_KEYS)
    if gw_unknown:
        raise MappingError(f"unknown [gateway] keys {sorted(gw_unknown)}", where=name,
                           hint=f"allowed: {', '.join(_GATEWAY_KEYS)}")
    container = gw.get("container", "auto")
    if container not in CONTAINERS:
        raise MappingError(f"container must be one of {', '.join(CONTAINERS)}", where=name)
    line_regex = gw.get("line_regex")
    if line_regex is not None:
        try:
            groups = re.compile(line_regex).groupindex
        except re.error as exc:
            raise MappingError(f"invalid line_regex: {exc}", where=name) from exc
        if not groups:
            raise MappingError("line_regex needs named groups, e.g. (?P<ts>\\S+)", where=name)
        if "'" in line_regex:
            raise MappingError("line_regex may not contain a single quote", where=name)
        container = "text"
    signature = gw.get("signature", [])
    if not isinstance(signature, list) or not all(
            isinstance(g, list) and g and all(isinstance(k, str) for k in g) for g in signature):
        raise MappingError("signature must be a list of lists of keys, e.g. [[\"RayID\"], [\"EdgeStartTimestamp\"]]",
                           where=name, hint="detection needs one key of every group in the sampled records")
    keep = gw.get("keep")
    if keep is not None:
        check_sql(str(keep), f"{name} [gateway].keep", "keep")
    columns = {k: _col_from_toml(k, v, f"{name} [columns].{k}") for k, v in cols.items()}
    ts_col = columns.get("ts_start") or columns["ts_end"]
    required = tuple(gw.get("required", ("|".join(ts_col.fields),)))
    if preset and not gw.get("name"):
        raise MappingError("a preset needs [gateway] name", where=name)
    return Spec(
        name=str(gw["name"]) if preset else f"mapping:{Path(name).name}",
        layer=str(gw.get("layer", "edge")),
        columns=columns,
        description=str(gw.get("description", gw.get("name", Path(name).stem))),
        container=container,
        line_regex=line_regex,
        keep_sql=None if keep is None else str(keep),
        keep_reason=str(gw.get("keep_reason", "")),
        required=required,
        signature=tuple(tuple(g) for g in signature),
        tz=gw.get("tz"),
        source="preset" if preset else str(name),
    )


def load_mapping(path: str | Path) -> Spec:
    """Read and compile a TOML mapping file.

    Example:
        >>> load_mapping("missing.toml")
        Traceback (most recent call last):
        ...
        forensics.errors.MappingError: missing.toml: mapping file not found (check the path)
    """
    p = Path(path)
    if not p.is_file():
        raise MappingError("mapping file not found", where=str(path), hint="check the path")
    return load_mapping_text(p.read_text(encoding="utf-8"), str(path))
