"""The gateway presets: the formats of the common front doors, shipped as TOML mapping files.

Each preset is a file in ``presets/`` written in the users' own mapping format
(:mod:`.mapping`): a user describing another gateway starts by copying one
(``forensics preset envoy > my-gateway.toml``). They are package data, so an installed wheel
carries them.

Example:
    >>> PRESETS["cloudflare-http"].layer
    'edge'
    >>> preset_toml("envoy").splitlines()[0]
    '# Preset envoy: Envoy / Envoy AI Gateway JSON access log.'
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from forensics.errors import ParameterError
from forensics.sources.gateway.mapping import load_mapping, load_mapping_text
from forensics.sources.gateway.readers import lit
from forensics.sources.gateway.spec import Col, Spec, json_path, meta_tenant

#: Detection order (and the order presets are listed in): the most specific formats first.
ORDER = ("cloudflare-http", "cloudflare-ai-gateway", "nginx-json", "envoy", "litellm", "otel", "smg-router")


def preset_toml(name: str) -> str:
    """The TOML text of a shipped preset (start a mapping of your own from it).

    Example:
        >>> "[columns]" in preset_toml("litellm")
        True
    """
    folder = resources.files("forensics.sources.gateway").joinpath("presets")
    item = folder.joinpath(f"{name}.toml")
    if not item.is_file():
        raise ParameterError(f"unknown preset {name!r}", hint=f"use one of: {', '.join(ORDER)}")
    return item.read_text(encoding="utf-8")


def _load_presets() -> dict[str, Spec]:
    folder = resources.files("forensics.sources.gateway").joinpath("presets")
    found = sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))
    names = [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]
    return {n: load_mapping_text(preset_toml(n), f"preset {n}.toml", preset=True) for n in names}


#: name -> the preset's spec, from the TOML files shipped in ``presets/``.
PRESETS: dict[str, Spec] = _load_presets()


def resolve_spec(format: str) -> Spec | None:
    """The preset or mapping named by ``format`` (None for 'auto').

    Example:
        >>> resolve_spec("litellm").layer
        'proxy'
        >>> resolve_spec("nope")
        Traceback (most recent call last):
        ...
        forensics.errors.ParameterError: unknown gateway format 'nope' (use auto, cloudflare-http, cloudflare-ai-gateway, nginx-json, envoy, litellm, otel, smg-router, or a mapping .toml file)
    """
    if format == "auto":
        return None
    if format in PRESETS:
        return PRESETS[format]
    if format.endswith(".toml") or Path(format).is_file():
        return load_mapping(format)
    raise ParameterError(
        f"unknown gateway format {format!r}",
        hint=f"use auto, {', '.join(PRESETS)}, or a mapping .toml file",
    )


def apply_options(spec: Spec, options: dict[str, Any]) -> Spec:
    """Return ``spec`` with the tenant/layer options applied.

    Example:
        >>> apply_options(PRESETS["litellm"], {"tenant_field": "end_user"}).columns["tenant_id"].fields
        ('end_user',)
    """
    cols = dict(spec.columns)
    if options.get("tenant_field"):
        cols["tenant_id"] = Col(fields=(str(options["tenant_field"]),))
    if options.get("tenant_header"):
        name = str(options["tenant_header"])
        cols["tenant_id"] = Col(fields=(f"$.RequestHeaders.{json_path(name)[2:]}",),
                                extra_fields=("RequestHeaders",),
                                sql=f"coalesce({{v}}, gw_json_get({{f:RequestHeaders}}, {lit(json_path(name))}))")
    if options.get("tenant_key"):
        cols["tenant_id"] = meta_tenant(spec.columns.get("tenant_id", Col()).fields or ("metadata",),
                                        (str(options["tenant_key"]),))
    if options.get("tenant_attribute"):
        a = json_path(str(options["tenant_attribute"]))[2:]
        cols["tenant_id"] = Col(fields=(f"$.attributes.{a}", f"$.resource.{a}"))
    layer = str(options["layer"]) if options.get("layer") else spec.layer
    return replace(spec, columns=cols, layer=layer)
