"""Safe YAML loading that keeps the line number of every mapping key and sequence item.

One job: bytes of a YAML file -> plain Python data (dict/list/str/int/float/bool/None) plus a
``{key path: line}`` map, or a ``YamlLoadError`` naming file and line. It never constructs
arbitrary objects (only the composer of ``yaml.SafeLoader`` runs; the values are built here).

Rejected, each with file:line and a clear message:
- bytes that are not UTF-8 (the message names the byte offset and the line);
- files larger than ``MAX_BYTES``;
- YAML syntax errors;
- alias bombs ("billion laughs"): the expanded node count is computed on the composed graph
  (aliases share nodes, so this is cheap) and must stay under ``MAX_NODES``; recursive aliases;
- documents that are not a single mapping (empty file, a list, a scalar, several documents);
- duplicate keys in one mapping (PyYAML would silently keep the last one);
- non-scalar keys and tags outside the plain JSON-like set (str, int, float, bool, null, seq, map).

Scalars are resolved with the YAML 1.2 core schema, not PyYAML's YAML 1.1 one: only
``true``/``false`` (any case form of those two) are booleans, so ``off``, ``on``, ``yes``, ``no``
stay strings (``name: off`` is the string "off"); dates stay strings. A number written in hex
(``0x10``), octal (``0o17``, or ``010``, which YAML 1.1 reads as 8), or with ``_`` (``1_000``) is
loaded as its value in a ``Numeral`` (an int or float that keeps ``written``): the scenario's
number types refuse it naming the key (``hicache.ratio: 0x10`` is 16, not a ratio anyone meant).
Merge keys (``<<: *base``) are supported; explicit keys win over merged ones.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from harness.core.errors import BadInput

MAX_BYTES = 1 << 20  # 1 MiB: a scenario is a few KiB
MAX_NODES = 100_000  # expanded node count (after aliases); a scenario has a few hundred
MAX_DEPTH = 64  # nesting levels; a scenario has fewer than 10

PathT = tuple  # tuple[str | int, ...]

_T_STR = "tag:yaml.org,2002:str"
_T_INT = "tag:yaml.org,2002:int"
_T_FLOAT = "tag:yaml.org,2002:float"
_T_BOOL = "tag:yaml.org,2002:bool"
_T_NULL = "tag:yaml.org,2002:null"
_T_SEQ = "tag:yaml.org,2002:seq"
_T_MAP = "tag:yaml.org,2002:map"
_T_MERGE = "tag:yaml.org,2002:merge"


class YamlLoadError(BadInput):
    """A file that cannot be loaded. ``line`` is 1-based (None when unknown)."""

    def __init__(self, file: str, line: int | None, message: str, path: str = ""):
        self.file = file
        self.line = line
        self.path = path
        self.message = message
        super().__init__(self.format())

    def format(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else f"{self.file}"
        return f"{where} {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


@dataclass
class LoadedYaml:
    """The document as plain data, with the 1-based line of each key path."""

    data: dict
    lines: dict = field(default_factory=dict)  # PathT -> int
    text: str = ""
    file: str = ""


def line_for(lines: dict, path: PathT) -> int:
    """Line of ``path`` or of its longest prefix that has one (1 for the document)."""
    p = tuple(path)
    while p:
        if p in lines:
            return lines[p]
        p = p[:-1]
    return lines.get((), 1)


_SIMPLE_KEY = re.compile(r"^[^.\[\]\s\"]+$")


def format_path(path: PathT) -> str:
    """``("variants", 2, "hicache", "ratio")`` -> ``variants[2].hicache.ratio``.

    Keys holding dots, brackets, quotes or spaces are written as ``["hicache.ratio"]``."""
    out = ""
    for el in path:
        if isinstance(el, int):
            out += f"[{el}]"
        elif _SIMPLE_KEY.match(el):
            out += ("." if out else "") + el
        else:
            out += '["' + el.replace("\\", "\\\\").replace('"', '\\"') + '"]'
    return out


class _Loader(yaml.SafeLoader):
    """SafeLoader with a YAML 1.2 core-schema resolver. Only ``compose`` is used."""

    yaml_implicit_resolvers: dict = {}


_Loader.add_implicit_resolver(_T_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(
    _T_INT,
    re.compile(r"^(?:[-+]?[0-9][0-9_]*|0x[0-9a-fA-F_]+|0o[0-7_]+)$"),
    list("-+0123456789"),
)
_Loader.add_implicit_resolver(
    _T_FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_Loader.add_implicit_resolver(_T_NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
_Loader.add_implicit_resolver(_T_MERGE, re.compile(r"^(?:<<)$"), ["<"])


class NumeralInt(int):
    """An int written in hex, octal, with a leading zero or with ``_``; ``written`` is its text."""

    written: str


class NumeralFloat(float):
    """A float written with ``_``; ``written`` is its text."""

    written: str


def numeral_problem(v: Any) -> str | None:
    """Why a number loaded from YAML is not written plainly in decimal, or None."""
    written = getattr(v, "written", None) if isinstance(v, (NumeralInt, NumeralFloat)) else None
    if written is None:
        return None
    s = written.lstrip("+-")
    if s[:2] in ("0x", "0X"):
        how = "a hex numeral"
    elif s[:2] in ("0o", "0O"):
        how = "an octal numeral"
    elif "_" not in s:
        how = "a numeral with a leading zero (octal in YAML 1.1)"
    else:
        how = "a numeral with '_'"
    return f"{written} is {how}: write the number in plain decimal ({v!r}), or quote it for a string"


def _numeral(value: int | float, written: str) -> Any:
    s = written.lstrip("+-")
    plain = "_" not in s and s[:2].lower() not in ("0x", "0o") and not (s[:1] == "0" and s[1:2].isdigit())
    if plain:
        return value
    out = NumeralInt(value) if isinstance(value, int) else NumeralFloat(value)
    out.written = written
    return out


def _scalar(node: ScalarNode, file: str) -> Any:
    tag, v = node.tag, node.value
    line = node.start_mark.line + 1
    try:
        if tag == _T_STR:
            return v
        if tag == _T_NULL:
            if v not in ("", "~", "null", "Null", "NULL"):
                raise ValueError
            return None
        if tag == _T_BOOL:
            if v.lower() not in ("true", "false"):
                raise ValueError
            return v.lower() == "true"
        if tag == _T_INT:
            s = v.replace("_", "")
            sign = -1 if s.startswith("-") else 1
            s = s.lstrip("+-")
            if s[:2] in ("0x", "0X"):
                return _numeral(sign * int(s[2:], 16), v)
            if s[:2] in ("0o", "0O"):
                return _numeral(sign * int(s[2:], 8), v)
            return _numeral(sign * int(s, 10), v)
        if tag == _T_FLOAT:
            s = v.replace("_", "").lower()
            if s.lstrip("+-") == ".inf":
                return -math.inf if s.startswith("-") else math.inf
            if s == ".nan":
                return math.nan
            return _numeral(float(s), v)
    except ValueError:
        raise YamlLoadError(file, line, f"{v!r} is not a valid {tag.rsplit(':', 1)[-1]}") from None
    raise YamlLoadError(
        file,
        line,
        f"unsupported tag {tag!r} (only plain strings, numbers, booleans, null, lists and mappings are allowed)",
    )


def _check_size(root: Node, file: str) -> None:
    """Count nodes and nesting as if every alias were expanded; fail fast on bombs and cycles. A
    node met again through an alias is not walked again: its size and height are remembered, and
    its height counts from where the alias puts it (a 3 KB file of 25 aliases, each nested 60
    levels in the next, built 1,500 levels and a RecursionError: exit 3)."""
    memo: dict[int, tuple[int, int]] = {}  # node → (nodes, levels below it), once walked
    active: set[int] = set()

    def too_deep(n: Node) -> YamlLoadError:
        return YamlLoadError(file, n.start_mark.line + 1, f"nesting too deep (limit {MAX_DEPTH} levels)")

    def size(n: Node, depth: int = 0) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            raise too_deep(n)
        k = id(n)
        if k in memo:
            if depth + memo[k][1] > MAX_DEPTH:
                raise too_deep(n)
            return memo[k]
        if k in active:
            raise YamlLoadError(file, n.start_mark.line + 1, "recursive alias (a node contains itself)")
        active.add(k)
        total, height = 1, 0
        children = n.value if isinstance(n, SequenceNode) else ()
        if isinstance(n, MappingNode):
            children = [c for pair in n.value for c in pair]
        for c in children:
            c_total, c_height = size(c, depth + 1)
            total, height = total + c_total, max(height, c_height + 1)
            if total > MAX_NODES:
                break
        active.discard(k)
        memo[k] = (total, height)
        if total > MAX_NODES:
            raise YamlLoadError(
                file,
                n.start_mark.line + 1,
                f"document too large after alias expansion (more than {MAX_NODES} nodes): "
                "refusing a possible YAML bomb",
            )
        return total, height

    size(root)


def _build(node: Node, path: PathT, lines: dict, file: str) -> Any:
    if isinstance(node, ScalarNode):
        return _scalar(node, file)
    if isinstance(node, SequenceNode):
        if node.tag != _T_SEQ:
            raise YamlLoadError(file, node.start_mark.line + 1, f"unsupported tag {node.tag!r}", format_path(path))
        out = []
        for i, item in enumerate(node.value):
            p = path + (i,)
            lines.setdefault(p, item.start_mark.line + 1)
            out.append(_build(item, p, lines, file))
        return out
    if isinstance(node, MappingNode):
        if node.tag != _T_MAP:
            raise YamlLoadError(file, node.start_mark.line + 1, f"unsupported tag {node.tag!r}", format_path(path))
        out: dict = {}
        explicit_line: dict[str, int] = {}
        merged: list[tuple[str, Any, int]] = []
        for kn, vn in node.value:
            kline = kn.start_mark.line + 1
            if isinstance(kn, ScalarNode) and kn.tag == _T_MERGE:
                sources = vn.value if isinstance(vn, SequenceNode) else [vn]
                for src in sources:
                    if not isinstance(src, MappingNode):
                        raise YamlLoadError(
                            file, kline, "'<<' merge needs a mapping or a list of mappings", format_path(path)
                        )
                    sub_lines: dict = {}
                    sub = _build(src, (), sub_lines, file)
                    for k, v in sub.items():
                        merged.append((k, v, sub_lines.get((k,), kline)))
                        for sp, sl in sub_lines.items():
                            if sp and sp[0] == k:
                                lines.setdefault(path + sp, sl)
                continue
            if not isinstance(kn, ScalarNode):
                raise YamlLoadError(
                    file, kline, "mapping keys must be plain scalars, not lists or mappings", format_path(path)
                )
            key = kn.value
            p = path + (key,)
            if key in explicit_line:
                raise YamlLoadError(
                    file,
                    kline,
                    f"duplicate key {key!r} (first at line {explicit_line[key]})",
                    format_path(p),
                )
            explicit_line[key] = kline
            lines[p] = kline
            out[key] = _build(vn, p, lines, file)
        for k, v, kline in merged:  # explicit keys win; earlier merge sources win
            if k not in out:
                out[k] = v
                lines.setdefault(path + (k,), kline)
        return out
    raise YamlLoadError(file, node.start_mark.line + 1, "unsupported YAML node")  # pragma: no cover


def _decode(raw: bytes, file: str) -> str:
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise YamlLoadError(
            file, line, f"not valid UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start} (save the file as UTF-8)"
        ) from None


def _kind(data: Any) -> str:
    if data is None:
        return "null"
    if isinstance(data, list):
        return "a list"
    return f"a scalar ({data!r})"


def load_yaml_text(text: str | bytes, file: str = "<string>") -> LoadedYaml:
    """Parse one YAML document that must be a mapping; see the module docstring."""
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise YamlLoadError(file, None, f"file too large ({len(text)} bytes; limit {MAX_BYTES})")
        text = _decode(text, file)
    elif len(text) > MAX_BYTES:
        raise YamlLoadError(file, None, f"file too large ({len(text)} characters; limit {MAX_BYTES})")
    if text.startswith("\ufeff"):
        text = text[1:]
    loader = None
    try:
        loader = _Loader(text)
        if not loader.check_node():
            raise YamlLoadError(file, 1, "empty document: expected a mapping (key: value lines)")
        root = loader.get_node()
        if loader.check_node():
            second = loader.get_node()
            line = second.start_mark.line + 1 if second is not None else None
            raise YamlLoadError(file, line, "more than one YAML document ('---'): expected exactly one")
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        msg = e.problem or "syntax error"
        if e.context:
            ctx_line = e.context_mark.line + 1 if e.context_mark is not None else None
            msg += f" ({e.context}" + (f" at line {ctx_line})" if ctx_line else ")")
        if "mapping values are not allowed" in msg:
            msg += "; put quotes around a value that contains ': '"
        raise YamlLoadError(file, line, f"YAML syntax error: {msg}") from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1 if e.position is not None else None
        raise YamlLoadError(
            file, line, f"unacceptable character #x{e.character:04x} (control characters are not allowed)"
        ) from None
    except yaml.YAMLError as e:  # pragma: no cover - any other loader error
        raise YamlLoadError(file, None, f"YAML error: {e}") from None
    except RecursionError:  # the composer recurses once per nesting level
        raise YamlLoadError(file, None, f"nesting too deep (limit {MAX_DEPTH} levels)") from None
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:  # pragma: no cover - check_node said there was one
        raise YamlLoadError(file, 1, "empty document: expected a mapping")
    _check_size(root, file)
    lines: dict = {(): root.start_mark.line + 1}
    data = _build(root, (), lines, file)
    if not isinstance(data, dict):
        raise YamlLoadError(
            file,
            root.start_mark.line + 1,
            f"the document must be a mapping (key: value lines), got {_kind(data)}",
        )
    return LoadedYaml(data=data, lines=lines, text=text, file=file)


def load_yaml_value(text: str) -> Any:
    """One value written as YAML (a ``--set KEY=VALUE``'s VALUE), read with the same resolver and
    bounds as a file's values: ``off`` stays a string, ``0x10`` is marked as a numeral."""
    indented = "".join("  " + ln for ln in text.splitlines(keepends=True))
    return load_yaml_text("v:\n" + indented, "<value>").data["v"]


def load_yaml(path: str | Path) -> LoadedYaml:
    """Read ``path`` and parse it with ``load_yaml_text``; the file name in errors is ``str(path)``."""
    file = str(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise YamlLoadError(file, None, f"cannot read file: {e.strerror or e}") from None
    return load_yaml_text(raw, file)
