"""A numeric key outside its declared range is refused by `validate` in one line that names the
key, the value, the range and the unit, exit 2 (issue 26, item 2): a sample of keys of each kind
(durations, rates, counts, fractions, bytes, ratios) against values too small, too big, NaN,
infinite, 400 digits long, hex, and the strings YAML leaves as strings (``1e300``)."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[3]
BASE = """\
name: t
server:
  backend: sim
  model_path: models/llama-tiny
  args: {--max-total-tokens: 4096}
  startup_timeout_s: {startup_timeout_s}
  sim: {time_scale: {time_scale}, host_mem_scale: {host_mem_scale}}
repeats: {repeats}
preflight: {reserve_gib: {reserve_gib}}
verdict: {max_error_rate: {max_error_rate}}
variants:
  - name: off
  - name: on
    hicache: {ratio: {ratio}, size_gb: null}
workloads:
  - kind: cold_prefill
    prompt_tokens: 100
    n: {n}
    timeout_s: {timeout_s}
  - kind: open_loop
    prompt_tokens: 100
    rate: [1, {rate}]
    duration_s: 1
"""
GOOD = {
    "startup_timeout_s": "60",
    "time_scale": "1",
    "host_mem_scale": "0.0625",
    "repeats": "1",
    "reserve_gib": "10",
    "max_error_rate": "0.01",
    "ratio": "2",
    "n": "1",
    "timeout_s": "30",
    "rate": "2",
}
# key: (its path in the error line, the range and unit the line must name, too small, too big)
KEYS = {
    "startup_timeout_s": ("server.startup_timeout_s", "0.01..86,400 s", "0", "1e6"),  # a duration
    "timeout_s": ("workloads[0].timeout_s", "0.01..604,800 s", "-1", "604801"),  # a duration
    "rate": ("workloads[1].rate[1]", "0.0001..1,000,000 requests/s", "0", "2e6"),  # a rate
    "n": ("workloads[0].n", "1..100,000 requests", "0", "100001"),  # a count
    "repeats": ("repeats", "1..1000 repeats", "0", "1001"),  # a count
    "max_error_rate": ("verdict.max_error_rate", "0..1 fraction of the requests", "-0.01", "1.5"),  # a fraction
    "host_mem_scale": ("server.sim.host_mem_scale", "1e-06..1 fraction of the host pool", "0", "2"),  # a fraction
    "reserve_gib": ("preflight.reserve_gib", "0..65,536 GiB", "-1", "1e5"),  # bytes
    "ratio": ("variants[1].hicache.ratio", "0.01..1000 x the device KV pool", "1e-300", "1e300"),  # a ratio
    "time_scale": ("server.sim.time_scale", "0.0001..10,000 x the cost model's time", "1e-5", "1.0e+300"),  # a ratio
}
HOSTILE = {
    "too small": None,
    "too big": None,
    "NaN": ".nan",
    "inf": ".inf",
    "-inf": "-.inf",
    "400 digits": "1" + "0" * 399,
    "hex": "0x10",
    "1e300 string": "1e300",
    "quoted 1e300": '"1e300"',
    "not a number": "lots",
    "true": "true",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ranges")
    shutil.copytree(ROOT / "scenarios" / "models" / "llama-tiny", d / "models" / "llama-tiny")
    return d


def _names_the_value(line: str, written: str) -> bool:
    """The line shows the value: as written, or as the number it is (``1e6`` is 1000000.0)."""
    if written in line:
        return True
    m = re.search(r"got (\S+)", line)
    if not m:
        return False
    try:
        shown, value = float(m.group(1)), float(written.replace(".inf", "inf").replace(".nan", "nan"))
    except ValueError:
        return False
    return shown == value or (math.isnan(shown) and math.isnan(value))


def _scenario(folder: Path, **values: str) -> Path:
    text = BASE
    for key, value in {**GOOD, **values}.items():
        text = text.replace("{" + key + "}", value)
    path = folder / "s.yaml"
    path.write_text(text)
    return path


def test_the_scenario_with_every_value_in_range_is_valid(folder, capsys):
    assert main(["validate", str(_scenario(folder))]) == 0, capsys.readouterr()


@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.parametrize("key", list(KEYS))
def test_a_value_outside_the_range_is_refused_in_one_line(key, case, folder, capsys):
    path_in_line, range_and_unit, small, big = KEYS[key]
    value = {"too small": small, "too big": big}.get(case) or HOSTILE[case]
    scenario = _scenario(folder, **{key: value})
    rc = main(["validate", str(scenario)])
    err = capsys.readouterr()
    lines = (err.out + err.err).strip().splitlines()
    assert rc == 2, lines
    assert len(lines) == 1, lines
    line = lines[0]
    assert "Traceback" not in line
    assert line.startswith(f"{scenario}:") and f" {path_in_line}: " in line, line
    assert range_and_unit in line, line  # the range and the unit
    assert _names_the_value(line, value.strip('"')), line


@pytest.mark.parametrize("written", ['"0.5"', '" 2 "', "2.0"])
def test_a_decimal_written_as_a_string_or_float_is_still_read(written, folder, capsys):
    # what ${VAR} expands to, or a quoted number, is read as its number
    assert main(["validate", str(_scenario(folder, ratio=written, n="2.0"))]) == 0, capsys.readouterr()


@pytest.mark.parametrize("written", ['"5%"', "0.05"])
def test_a_fraction_takes_a_percentage(written, folder, capsys):
    assert main(["validate", str(_scenario(folder, max_error_rate=written))]) == 0, capsys.readouterr()


def test_a_whole_number_key_refuses_a_fraction(folder, capsys):
    assert main(["validate", str(_scenario(folder, n="2.5"))]) == 2
    assert "workloads[0].n: expected a whole number in 1..100,000 requests, got 2.5" in capsys.readouterr().err


def test_repeats_auto_is_still_a_word(folder, capsys):
    assert main(["validate", str(_scenario(folder, repeats="auto"))]) == 0, capsys.readouterr()


def test_an_override_out_of_range_is_refused_the_same_way(folder, tmp_path, capsys):
    scenario = _scenario(folder)
    out = ["--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "p")]
    rc = main(["run", str(scenario), "--set", "server.sim.time_scale=1e300", "--dry-run", *out])
    err = capsys.readouterr().err
    assert rc == 2
    assert "server.sim.time_scale: expected a number in 0.0001..10,000 x the cost model's time, got 1e+300" in err
    assert not (tmp_path / "r").exists()
