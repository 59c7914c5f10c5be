"""Users' TOML mapping files: a format the presets do not know, described field by field.

Example:
    >>> spec = load_mapping_text('[columns]\\nts_start = "time"\\nrequest_id = "$.req.id"', "m.toml")
    >>> spec.columns["request_id"].fields
    ('$.req.id',)
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from forensics.errors import MappingError
from forensics.sources.gateway.spec import CONTAINERS, MAPPABLE_COLUMNS, UNITS, Col, Spec

_COL_KEYS = {"field", "fields", "regex", "group", "map", "default", "unit", "format"}


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
    return Col(
        fields=tuple(fields),
        regex=regex,
        group=group,
        values={str(k): str(v) for k, v in mapping.items()} if mapping else None,
        default=None if value.get("default") is None else str(value["default"]),
        unit=unit,
        format=value.get("format"),
    )


def load_mapping_text(text: str, name: str) -> Spec:
    """Compile the text of a TOML mapping file into a :class:`Spec`.

    Example:
        >>> spec = load_mapping_text('''
        ... [gateway]
        ... layer = "proxy"
        ... [columns]
        ... ts_start = { field = "started", unit = "ms" }
        ... tenant_id = { field = "$.consumer.username", regex = "^team-(.*)$" }
        ... ''', "kong.toml")
        >>> spec.layer, spec.columns["tenant_id"].regex
        ('proxy', '^team-(.*)$')
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
    gw_unknown = set(gw) - {"name", "layer", "container", "line_regex", "tz", "required", "description"}
    if gw_unknown:
        raise MappingError(f"unknown [gateway] keys {sorted(gw_unknown)}", where=name,
                           hint="allowed: name, layer, container, line_regex, tz, required, description")
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
    columns = {k: _col_from_toml(k, v, f"{name} [columns].{k}") for k, v in cols.items()}
    ts_col = columns.get("ts_start") or columns["ts_end"]
    required = tuple(gw.get("required", ("|".join(ts_col.fields),)))
    return Spec(
        name=f"mapping:{Path(name).name}",
        layer=str(gw.get("layer", "edge")),
        columns=columns,
        description=str(gw.get("description", gw.get("name", Path(name).stem))),
        container=container,
        line_regex=line_regex,
        required=required,
        fix_key=f"{Path(name).name} [columns]",
        tz=gw.get("tz"),
        source=str(name),
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
