"""A run's manifest.json as typed, read-only objects: `Manifest`, its `ManifestVariant` entries
(with their `HicacheSettings`) and the `StoredScenario` — whose text is parsed here, once, for
every reader (the workloads and their kinds, the ``verdict:`` rules, the quality block).

`read_manifest` brings an older file up to today's version (`harness.store.versions`) and checks
the shape every reader relies on: an object whose ``scenario`` has a string ``name`` and whose
``variants`` are objects with a non-empty string ``name``; otherwise a ResultsError (exit 2)
naming the file. The blocks other modules own (host, env, sglang, probe, a variant's build and
server) are kept as the JSON they are; `Manifest.raw` is the whole object (what a merge or a
resume copies).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.yaml_lines import YamlLoadError, load_yaml_text
from harness.store import results, versions
from harness.store.probe_result import ProbeResult
from harness.store.stored_fields import from_keys

Json = Mapping[str, Any]


@dataclass(frozen=True)
class StoredScenario:
    """The scenario as the run stored it: its name, path, hash and text (secrets redacted)."""

    name: str
    path: str | None = None
    hash: str | None = None
    text: str = ""
    overrides: tuple[str, ...] = ()
    unrun_checks: tuple[Json, ...] = ()  # checks the run set aside (harness.analysis.expectations.unrun_results)

    @functools.cached_property
    def data(self) -> Json:
        """The text as parsed YAML; {} when there is none or it cannot be parsed (a reader then
        falls back to what the summaries say). The one parser of the stored text."""
        if not self.text:
            return {}
        try:
            data = load_yaml_text(self.text, "<stored scenario>").data
        except YamlLoadError:
            return {}
        return data if isinstance(data, Mapping) else {}

    def block(self, key: str) -> Json:
        """A top-level block of the stored scenario (``verdict``, ``quality``...), {} when absent."""
        v = self.data.get(key)
        return v if isinstance(v, Mapping) else {}


@dataclass(frozen=True)
class HicacheSettings:
    """A variant's HiCache settings as the run resolved them (None: HiCache off)."""

    ratio: float | None = None
    size_gb: float | None = None
    mem_layout: str | None = None
    write_policy: str | None = None
    io_backend: str | None = None
    storage_backend: str | None = None


@dataclass(frozen=True)
class BuildInfo:
    """A variant's sglang build as `harness.run.builds` checked it (``variants[].build``)."""

    build: Any  # the build's name
    version: Any
    imported_version: Any
    commit: Any  # its checkout's git commit, branch and dirty flag (None without a checkout)
    branch: Any
    dirty: Any
    sglang_source: Any
    imported_file: Any
    python: Any
    raw: Json

    @classmethod
    def from_json(cls, data: Any) -> BuildInfo | None:
        if not data or not isinstance(data, Mapping):
            return None
        git = _obj(data.get("git"))
        return from_keys(
            cls, data, commit=git.get("commit"), branch=git.get("branch"), dirty=git.get("dirty"), raw=data
        )


@dataclass(frozen=True)
class ManifestVariant:
    name: str
    dir: str
    config_hash: str | None
    hicache: HicacheSettings | None
    expect: str = "ok"
    expect_cause: str | None = None
    build: BuildInfo | None = None  # harness.run.builds' check of its sglang (None without one)
    argv: tuple[str, ...] = ()  # the server's command line (() for an external server)
    env: Json = field(default_factory=dict)
    url: str | None = None  # an external server's (``backend: external``)
    server_version: Any = None  # an external server's sglang version
    raw: Json = field(default_factory=dict)  # the whole entry


@dataclass(frozen=True)
class Manifest:
    schema_version: int
    kind: str  # "run", or "merged" for a folder built by harness merge
    scenario: StoredScenario
    variants: tuple[ManifestVariant, ...]
    created_at: str | None
    simulated: bool
    backend: str | None
    repeats: int | None
    seed: int | None
    sglang: Json  # {version, location[, error]} ({} when not known)
    probe: Json  # the platform probe's result ({} without one)
    host: Json
    env: Json
    shard: Json  # {index, count} of a --shard run ({} otherwise)
    raw: Json
    harness_version: str | None = None
    harness_argv: tuple[str, ...] = ()
    sglang_source: Json = field(default_factory=dict)  # the checkout sglang was imported from ({} when not known)
    design_warnings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # {variant: warnings}
    platform: ProbeResult | None = None  # ``probe``, typed (`harness.store.probe_result`)

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.variants]

    def variant(self, name: str) -> ManifestVariant | None:
        return next((v for v in self.variants if v.name == name), None)

    @classmethod
    def from_json(cls, path: Path, data: Any) -> Manifest:
        if not isinstance(data, Mapping):
            raise results.ResultsError(f"{path}: expected a JSON object, found {results._kind(data)}")
        data = versions.upgrade(path, dict(data), versions.MANIFEST)
        sc = data.get("scenario")
        if not isinstance(sc, Mapping) or not isinstance(sc.get("name"), str):
            raise results.ResultsError(
                f"{path}: 'scenario' must be an object with a string 'name', found {results._kind(sc)}"
            )
        entries = data.get("variants", [])
        if not isinstance(entries, list):
            raise results.ResultsError(f"{path}: 'variants' must be a list, found {results._kind(entries)}")
        variants = []
        for i, e in enumerate(entries):
            if not isinstance(e, Mapping) or not isinstance(e.get("name"), str) or not e["name"]:
                raise results.ResultsError(f"{path}: variants[{i}] must be an object with a non-empty string 'name'")
            variants.append(_variant(path, i, e))
        text = sc.get("text")
        overrides = sc.get("overrides")
        return cls(
            schema_version=int(data["schema_version"]),
            kind=str(data.get("kind") or "run"),
            scenario=StoredScenario(
                name=sc["name"],
                path=sc.get("path") if isinstance(sc.get("path"), str) else None,
                hash=sc.get("hash") if isinstance(sc.get("hash"), str) else None,
                text=text if isinstance(text, str) else "",
                overrides=tuple(str(o) for o in overrides) if isinstance(overrides, list) else (),
                unrun_checks=tuple(u for u in sc.get("unrun_checks") or () if isinstance(u, Mapping)),
            ),
            variants=tuple(variants),
            created_at=data.get("created_at") if isinstance(data.get("created_at"), str) else None,
            simulated=data.get("simulated") is True,
            backend=data.get("backend") if isinstance(data.get("backend"), str) else None,
            repeats=data.get("repeats") if isinstance(data.get("repeats"), int) else None,
            seed=data.get("seed") if isinstance(data.get("seed"), int) else None,
            sglang=_obj(data.get("sglang")),
            probe=_obj(data.get("probe")),
            host=_obj(data.get("host")),
            env=_obj(data.get("env")),
            shard=_obj(data.get("shard")),
            raw=data,
            harness_version=data.get("harness_version"),
            harness_argv=tuple(data.get("harness_argv") or ()),
            sglang_source=_obj(data.get("sglang_source")),
            design_warnings={str(n): tuple(ws or ()) for n, ws in _obj(data.get("design_warnings")).items()},
            platform=ProbeResult.from_json(data.get("probe")),
        )


def _obj(v: Any) -> Json:
    return v if isinstance(v, Mapping) else {}


def _variant(path: Path, i: int, e: Json) -> ManifestVariant:
    h = e.get("hicache")
    hicache = None
    if isinstance(h, Mapping):
        known = HicacheSettings.__dataclass_fields__
        hicache = HicacheSettings(**{k: v for k, v in h.items() if k in known})
    elif h is not None:
        raise results.ResultsError(f"{path}: variants[{i}].hicache must be an object or null")
    return ManifestVariant(
        name=e["name"],
        dir=str(e.get("dir") or results.safe_name(e["name"])),
        config_hash=e.get("config_hash") if isinstance(e.get("config_hash"), str) else None,
        hicache=hicache,
        expect=str(e.get("expect") or "ok"),
        expect_cause=e.get("expect_cause"),
        build=BuildInfo.from_json(e.get("build")),
        argv=tuple(e.get("argv") or ()),
        env=_obj(e.get("env")),
        url=e.get("url") or None,
        server_version=_obj(e.get("server")).get("version"),
        raw=e,
    )


def read_manifest(root: Path) -> Manifest:
    """A run folder's manifest.json as a :class:`Manifest` (upgraded and checked)."""
    path = results.RunPaths(Path(root)).manifest
    return Manifest.from_json(path, results.read_json(path))
