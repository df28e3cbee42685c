"""yaml_lines: safe loading with line numbers, and every kind of unloadable file."""

import tracemalloc

import pytest

from harness.core.yaml_lines import (
    MAX_NODES,
    YamlLoadError,
    format_path,
    line_for,
    load_yaml,
    load_yaml_text,
    numeral_problem,
)


def err(text, file="f.yaml"):
    with pytest.raises(YamlLoadError) as ei:
        load_yaml_text(text, file)
    return ei.value


def test_lines_for_keys_and_items():
    y = load_yaml_text("a: 1\nb:\n  c: x\n  d:\n    - 1\n    - {e: 2}\n", "f.yaml")
    assert y.data == {"a": 1, "b": {"c": "x", "d": [1, {"e": 2}]}}
    assert y.lines[("a",)] == 1
    assert y.lines[("b", "c")] == 3
    assert y.lines[("b", "d", 0)] == 5
    assert y.lines[("b", "d", 1, "e")] == 6
    assert line_for(y.lines, ("b", "d", 1, "missing")) == 6
    assert line_for(y.lines, ("nope",)) == 1


def test_yaml12_core_scalars():
    y = load_yaml_text(
        "a: off\nb: on\nc: yes\nd: true\ne: False\nf: 010\ng: 0x10\nh: 1_000\ni: 1.5\nj: 1e3\n"
        "k: ~\nl: 2024-01-01\nm: '12'\nn:\n",
        "f.yaml",
    )
    assert y.data == {
        "a": "off",
        "b": "on",
        "c": "yes",
        "d": True,
        "e": False,
        "f": 10,
        "g": 16,
        "h": 1000,
        "i": 1.5,
        "j": 1000.0,
        "k": None,
        "l": "2024-01-01",
        "m": "12",
        "n": None,
    }
    # written otherwise than in plain decimal: the value, marked for the number keys to refuse
    assert [numeral_problem(y.data[k]) for k in "fgh"] == [
        "010 is a numeral with a leading zero (octal in YAML 1.1): write the number in plain decimal (10), "
        "or quote it for a string",
        "0x10 is a hex numeral: write the number in plain decimal (16), or quote it for a string",
        "1_000 is a numeral with '_': write the number in plain decimal (1000), or quote it for a string",
    ]
    assert [numeral_problem(y.data[k]) for k in "ijm"] == [None, None, None]


def test_merge_keys_explicit_wins():
    y = load_yaml_text("base: &b {x: 1, y: 2}\nv:\n  <<: *b\n  y: 3\n", "f.yaml")
    assert y.data["v"] == {"x": 1, "y": 3}
    assert y.lines[("v", "y")] == 4


def test_duplicate_key_rejected_with_both_lines():
    e = err("a: 1\nserver:\n  tp_size: 1\n  tp_size: 2\n")
    assert (e.file, e.line, e.path) == ("f.yaml", 4, "server.tp_size")
    assert "duplicate key 'tp_size' (first at line 3)" in str(e)
    assert str(e).startswith("f.yaml:4 server.tp_size: duplicate key")


def test_syntax_error_has_line():
    e = err("a: 1\nb: [1, 2\nc: 3\n")
    assert e.line in (2, 3) and "YAML syntax error" in e.message


def test_bad_indentation_hint():
    e = err("a:\n  b: c: d\n")
    assert e.line == 2 and "quotes" in e.message


def test_non_utf8_names_offset_and_line():
    e = err(b"a: 1\nb: caf\xe9\n")
    assert e.line == 2
    assert "byte 0xe9 at offset 11" in e.message


def test_utf8_bom_accepted():
    assert load_yaml_text(b"\xef\xbb\xbfa: 1\n").data == {"a": 1}


def test_control_character_rejected():
    e = err("a: 1\nb: \x07\n")
    assert e.line == 2 and "control" in e.message


@pytest.mark.parametrize(
    "text,needle",
    [
        ("", "empty document"),
        ("# only a comment\n", "empty document"),
        ("---\n", "got null"),
        ("- a\n- b\n", "got a list"),
        ("42\n", "got a scalar"),
        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
    ],
)
def test_not_a_single_mapping(text, needle):
    e = err(text)
    assert needle in e.message
    assert e.file == "f.yaml" and e.line is not None


def test_billion_laughs_fails_fast():
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for c in "bcdefghij":
        text += f"{c}: &{c} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = c
    tracemalloc.start()
    try:
        e = err(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak  # refused while counting nodes, never expanded (9**10 of them)
    assert "YAML bomb" in e.message and str(MAX_NODES) in e.message
    assert e.line is not None


def test_recursive_alias_rejected():
    e = err("a: &a [1, *a]\n")
    assert "recursive" in e.message


def test_unsafe_tags_rejected():
    e = err("a: !!python/object/apply:os.system ['true']\n")
    assert "unsupported tag" in e.message
    e = err("a: !!binary aGVsbG8=\n")
    assert "unsupported tag" in e.message


def test_complex_key_rejected():
    e = err("? [a, b]\n: 1\n")
    assert "keys must be plain scalars" in e.message


def test_file_too_large(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_bytes(b"a: " + b"x" * (2 << 20) + b"\n")
    with pytest.raises(YamlLoadError, match="too large"):
        load_yaml(p)


def test_missing_file(tmp_path):
    with pytest.raises(YamlLoadError, match="cannot read"):
        load_yaml(tmp_path / "nope.yaml")


def test_format_path():
    assert format_path(("variants", 2, "hicache", "ratio")) == "variants[2].hicache.ratio"
    assert format_path(("server", "args", "--max-total-tokens")) == "server.args.--max-total-tokens"
    assert format_path(("matrix", 0, "axes", "hicache.ratio", 1)) == 'matrix[0].axes["hicache.ratio"][1]'
