"""scenario: typed loading, error lines (file:line key.path: message), ${VAR}, matrix, hashes."""

import re
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from harness.scenario import (
    Check,
    ScenarioError,
    TokenSize,
    json_schema,
    load_scenario,
    load_scenario_text,
    scenario_hash,
    variant_config_hash,
)
from harness.workloads.kinds.cold_prefill import ColdPrefill
from harness.workloads.kinds.decode import Decode

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "scenarios"
LINE_RE = re.compile(r"^(?P<file>[^\n]+?):(?P<line>\d+)(?: (?P<path>[^\n]+?))?: (?P<msg>.+)$")


def errors_of(path, env=None):
    with pytest.raises(ScenarioError) as ei:
        load_scenario(path, env or {})
    for line in ei.value.errors:
        assert LINE_RE.match(line), line
    return ei.value.errors


@pytest.fixture(autouse=True)
def model_dirs(tmp_path):
    """The simulated backend reads the model's config.json at validation: give the scenarios
    these tests write a real one under the names they use."""
    config = (ROOT / "scenarios" / "models" / "llama-tiny" / "config.json").read_text()
    for name in ("m", "models/llama-tiny", "models/a"):
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / name / "config.json").write_text(config)


def write(tmp_path, body, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


BASE = """\
name: t
server:
  backend: sim
  model_path: m
variants:
  - name: off
"""
# For tests of expansion and paths: sglang reads its own model, so paths that do not exist here
# are not refused (the simulator's must hold a config.json).
SGLANG_BASE = BASE.replace("backend: sim", "backend: sglang")


def one_error(tmp_path, body, env=None):
    p = write(tmp_path, body)
    errs = errors_of(p, env)
    assert len(errs) == 1, errs
    m = LINE_RE.match(errs[0])
    assert m.group("file") == str(p)
    return int(m.group("line")), m.group("path"), m.group("msg")


# ------------------------------------------------------------------------- fixture files


@pytest.mark.parametrize(
    "fixture,line,path,msg",
    [
        ("bad_syntax.yaml", 5, None, "YAML syntax error"),
        ("bad_unknown_top.yaml", 7, "workload", "unknown key 'workload' (did you mean 'workloads'?)"),
        ("bad_unknown_nested.yaml", 10, "variants[1].hicache.mem_layuot", "unknown key 'mem_layuot'"),
        ("bad_type.yaml", 5, "server.tp_size", "expected a whole number in 1..1024 GPUs, got 'two'"),
        ("bad_missing.yaml", 2, "server.model_path", "required key is missing"),
        ("bad_dup_variant.yaml", 9, "variants[2].name", "duplicate variant name 'off' (first at variants[0], line 6)"),
        (
            "bad_dup_key.yaml",
            7,
            "server.args.--max-total-tokens",
            "duplicate key '--max-total-tokens' (first at line 6)",
        ),
        (
            "bad_ratio.yaml",
            9,
            "variants[1].hicache.ratio",
            "expected a number in 0.01..1000 x the device KV pool, got 0",
        ),
        (
            "bad_length.yaml",
            11,
            "workloads[1].output_tokens",
            "expected a whole number in 1..1,000,000,000 tokens, got -5",
        ),
        ("bad_nonutf8.yaml", 2, None, "not valid UTF-8: byte 0xe9 at offset"),
        ("bad_empty.yaml", 1, None, "empty document"),
        ("bad_list.yaml", 1, None, "must be a mapping (key: value lines), got a list"),
        ("bad_scalar.yaml", 1, None, "got a scalar"),
        ("bad_multidoc.yaml", 3, None, "more than one YAML document"),
        ("bad_bomb.yaml", None, None, "YAML bomb"),
    ],
)
def test_bad_fixture(fixture, line, path, msg):
    errs = errors_of(FIX / fixture)
    # every error is reported in one pass (a fixture may have others, e.g. its model path): find its own
    m = next((m for m in map(LINE_RE.match, errs) if m and m.group("path") == path), LINE_RE.match(errs[0]))
    assert m.group("file") == str(FIX / fixture)
    if line is not None:
        assert int(m.group("line")) == line, errs
    assert m.group("path") == path, errs
    assert msg in m.group("msg"), errs


def test_bad_enum_exact_message():
    errs = errors_of(FIX / "bad_enum.yaml")
    assert errs == [
        f"{FIX / 'bad_enum.yaml'}:12 variants[2].hicache.mem_layout: expected one of layer_first, "
        "page_first, page_first_direct, page_first_kv_split, page_head, got 'page-first'"
    ]


def test_relative_file_name_kept_as_given(monkeypatch):
    monkeypatch.chdir(ROOT)
    errs = errors_of(Path("tests/fixtures/scenarios/bad_enum.yaml"))
    assert errs[0].startswith("tests/fixtures/scenarios/bad_enum.yaml:12 variants[2].hicache.mem_layout: ")


def test_bomb_is_refused_before_it_expands():
    tracemalloc.start()
    try:
        errs = errors_of(FIX / "bad_bomb.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak  # counted, never built
    (err,) = errs
    assert "more than 100000 nodes" in err and "YAML bomb" in err


# ------------------------------------------------------------------------- inline bad inputs


@pytest.mark.parametrize(
    "extra,line,path,msg",
    [
        # workloads: discriminated union, its tag is not part of the path
        ("workloads:\n  - kind: decode\n    batch: 1\n    bogus: 3\n", 10, "workloads[0].bogus", "unknown key 'bogus'"),
        ("workloads:\n  - kind: warm_prefill\n", 8, "workloads[0].kind", "unknown kind 'warm_prefill'"),
        ("workloads:\n  - n: 2\n", 8, "workloads[0].kind", "missing 'kind'"),
        ("workloads:\n  - kind: cold_prefill\n", 8, "workloads[0].prompt_tokens", "required key is missing"),
        (
            "workloads:\n  - kind: cold_prefill\n    prompt_tokens: 0\n",
            9,
            "workloads[0].prompt_tokens",
            "must be >= 1 token",
        ),
        (
            'workloads:\n  - kind: cold_prefill\n    prompt_tokens: "0x pool"\n',
            9,
            "workloads[0].prompt_tokens",
            "must be > 0",
        ),
        (
            "workloads:\n  - kind: cold_prefill\n    prompt_tokens: lots\n",
            9,
            "workloads[0].prompt_tokens",
            '"<fraction>x pool"',
        ),
        (
            "workloads:\n  - kind: parallel_prefixes\n    k: 0\n    prompt_tokens: 10\n",
            9,
            "workloads[0].k",
            "expected a whole number in 1..100,000 prompts, got 0",
        ),
        ("workloads:\n  - kind: decode\n  - kind: decode\n", 9, "workloads[1]", "duplicate workload name 'decode'"),
        ("repeats: 0\n", 7, "repeats", "expected a whole number in 1..1000 repeats, got 0"),
        # hex, octal and '_' numerals: the loader turned 0x10 into 16 and it validated as a ratio
        ("  - name: on\n    hicache: {ratio: 0x10}\n", 8, "variants[1].hicache.ratio", "0x10 is a hex numeral"),
        ("  - name: on\n    hicache: {ratio: 0o3}\n", 8, "variants[1].hicache.ratio", "0o3 is an octal numeral"),
        ("repeats: 010\n", 7, "repeats", "010 is a numeral with a leading zero (octal in YAML 1.1)"),
        ("seed: 1_000\n", 7, "seed", "1_000 is a numeral with '_': write the number in plain decimal (1000)"),
        ("sampling:\n  interval_s: 0_5.0\n", 8, "sampling.interval_s", "0_5.0 is a numeral with '_'"),
        ("repeats: true\n", 7, "repeats", "expected a whole number in 1..1000 repeats, got true"),
        # sglang flags the harness reads as numbers: .inf was an OverflowError (exit 3) in validate's plan
        (
            "  - name: on\n    args: {--max-total-tokens: .inf}\n",
            8,
            "variants[1].args.--max-total-tokens",
            "inf is not a whole number",
        ),
        ("  - name: on\n    args: {--page-size: 0}\n", 8, "variants[1].args.--page-size", "0 is out of range (1 to"),
        (
            "  - name: on\n    args: {--mem-fraction-static: 1.5}\n",
            8,
            "variants[1].args.--mem-fraction-static",
            "1.5 is out of range ((0, 1])",
        ),
        (
            "  - name: on\n    args: {--chunked-prefill-size: 0}\n",
            8,
            "variants[1].args.--chunked-prefill-size",
            "out of range (-1 to",
        ),
        ("seed: -1\n", 7, "seed", "expected a whole number in 0..9223372036854775807 (a seed: no unit), got -1"),
        ("sampling:\n  interval_s: 0\n", 8, "sampling.interval_s", "expected a number in 0.01..3600 s, got 0"),
        ("sampling:\n  gpu: maybe\n", 8, "sampling.gpu", "expected auto, true or false"),
        ("preflight:\n  mode: loud\n", 8, "preflight.mode", "expected one of warn, strict, off, got 'loud'"),
        ("quality:\n  tasks: [needle, haystack]\n", 8, "quality.tasks[1]", "expected one of needle"),
        ("quality:\n  lengths: []\n", 8, "quality.lengths", "at least 1"),
        ("quality:\n  enabled: true\n  baseline_variant: of\n", 9, "quality.baseline_variant", "no variant named 'of'"),
        # a HiCache variant as the parity baseline: corrupt against corrupt was a PASS
        (
            "  - name: on\n    hicache: {ratio: 2}\nquality:\n  enabled: true\n  baseline_variant: on\n",
            11,
            "quality.baseline_variant",
            "baseline_variant on must be a variant with HiCache off (it has a hicache block)",
        ),
        ("expectations:\n  thresholds:\n    ttft_p50: 5\n", 9, "expectations.thresholds.ttft_p50", "percentage"),
        ('expectations:\n  checks:\n    - "on: ttft_p50 ~ 3"\n', 9, "expectations.checks[0]", "cannot parse check"),
        (
            'expectations:\n  checks:\n    - "ofF: status.ready_s <= 3"\n',
            9,
            "expectations.checks[0]",
            "unknown variant 'ofF'",
        ),
        (
            'expectations:\n  checks:\n    - "off: quality.parity >= PASS"\n',
            9,
            "expectations.checks[0]",
            "needs a number",
        ),
    ],
)
def test_inline_bad(tmp_path, extra, line, path, msg):
    got_line, got_path, got_msg = one_error(tmp_path, BASE + extra)
    assert (got_line, got_path) == (line, path), got_msg
    assert msg in got_msg


@pytest.mark.parametrize(
    "body,line,path,msg",
    [
        (
            "name: t\nserver:\n  backend: sglang\n  model_path: m\n  sim: {time_scale: 0.1}\nvariants:\n  - name: off\n",
            5,
            "server.sim",
            "only allowed with backend: sim",
        ),
        (
            "name: t\nserver:\n  backend: sglang\n  model_path: m\nvariants:\n  - name: off\n    sim_faults: [hang_at_startup]\n",
            7,
            "variants[0].sim_faults",
            "only allowed with backend: sim",
        ),
        (
            BASE + "  - name: on\n    hicache: {}\n    expect_cause: assertion\n",
            9,
            "variants[1].expect_cause",
            "only allowed with expect: startup_failed",
        ),
        (
            BASE + "  - name: on\n    expect: startup_failed\n    expect_cause: host-memory\n",
            9,
            "variants[1].expect_cause",
            "expected one of host_memory",
        ),
        (BASE + "  - name: ''\n", 7, "variants[1].name", "must not be empty"),
        (BASE + "  - name: a/b\n", 7, "variants[1].name", "not a valid name"),
        (BASE + "  - name: 'a:b'\n", 7, "variants[1].name", "not a valid name"),
        (
            BASE + "  - name: on\n    hicache: {ratio: -1}\n",
            8,
            "variants[1].hicache.ratio",
            "expected a number in 0.01..1000 x the device KV pool, got -1",
        ),
        (
            BASE + "  - name: on\n    hicache: {size_gb: 0}\n",
            8,
            "variants[1].hicache.size_gb",
            "expected a number in 0.001..65,536 GB per rank, got 0",
        ),
        (BASE + "  - name: on\n    hicache: {ratio: .inf}\n", 8, "variants[1].hicache.ratio", "finite"),
        (
            BASE + "  - name: on\n    hicache: {write_policy: write_around}\n",
            8,
            "variants[1].hicache.write_policy",
            "expected one of write_through, write_back, write_through_selective, got 'write_around'",
        ),
        (BASE + "  - name: on\n    hicache: 3\n", 8, "variants[1].hicache", "expected a mapping"),
        (
            BASE + "  - name: on\n    args: {max-total-tokens: 5}\n",
            8,
            "variants[1].args.max-total-tokens",
            "start with '--'",
        ),
        (
            BASE + "  - name: on\n    args: {--hicache-ratio: 5}\n",
            8,
            "variants[1].args.--hicache-ratio",
            "set hicache.ratio",
        ),
        (BASE + "  - name: on\n    args: {--port: 5}\n", 8, "variants[1].args.--port", "harness picks the port"),
        (BASE + "  - name: on\n    args: {--foo: {a: 1}}\n", 8, "variants[1].args.--foo", "expected a flag value"),
        (
            BASE + "  - name: on\n    env: {SGLANG_X: true}\n",
            8,
            "variants[1].env.SGLANG_X",
            "environment values are strings",
        ),
        (
            "name: t\nserver:\n  backend: sim\n  model_path: m\n  tp_size: 0\nvariants:\n  - name: off\n",
            5,
            "server.tp_size",
            "expected a whole number in 1..1024 GPUs, got 0",
        ),
        (
            "name: t\nserver:\n  backend: cuda\n  model_path: m\nvariants:\n  - name: off\n",
            3,
            "server.backend",
            "expected one of sglang, sim, external, got 'cuda'",
        ),
        ("name: t\nserver:\n  backend: sim\n  model_path: m\n", 1, "variants", "no variants"),
        (
            "name: 'bad name'\nserver:\n  backend: sim\n  model_path: m\nvariants:\n  - name: off\n",
            1,
            "name",
            "not a valid scenario name",
        ),
        (
            "name: t\nserver:\n  backend: sim\n  model_path: m\n  sim:\n    host_mem_scale: 2\nvariants:\n  - name: off\n",
            6,
            "server.sim.host_mem_scale",
            "expected a number in 1e-06..1 fraction of the host pool, got 2",
        ),
        (
            "name: t\nserver:\n  backend: sim\n  model_path: m\n  sim:\n    faults: ['crash at 3']\nvariants:\n  - name: off\n",
            6,
            "server.sim.faults[0]",
            "unknown fault 'crash at 3'",
        ),
        (
            "name: t\nserver:\n  backend: sim\n  model_path: m\nvariants:\n  - name: off\n    sim_faults: [crash_at_reqest=3]\n",
            7,
            "variants[0].sim_faults[0]",
            "did you mean 'crash_at_request'?",
        ),
        ("name: t\nserver: [1]\nvariants:\n  - name: off\n", 2, "server", "expected a mapping"),
    ],
)
def test_inline_bad_full(tmp_path, body, line, path, msg):
    got_line, got_path, got_msg = one_error(tmp_path, body)
    assert (got_line, got_path) == (line, path), got_msg
    assert msg in got_msg


def test_several_errors_reported_together_sorted(tmp_path):
    p = write(tmp_path, BASE + "repeats: 0\nseed: x\nsampling:\n  interval_s: -1\n")
    errs = errors_of(p)
    assert [LINE_RE.match(e).group("path") for e in errs] == ["repeats", "seed", "sampling.interval_s"]


def test_quality_needs_off_variant(tmp_path):
    body = BASE.replace("- name: off", "- name: on\n    hicache: {}") + "quality:\n  enabled: true\n"
    line, path, msg = one_error(tmp_path, body)
    assert path == "quality.enabled" and "OFF variant" in msg


def test_quality_baseline_defaults_to_first_off(tmp_path):
    body = BASE.replace("- name: off", "- name: on\n    hicache: {}\n  - name: plain") + "quality:\n  enabled: true\n"
    s = load_scenario(write(tmp_path, body), {})
    assert s.quality.baseline_variant == "plain"


# ---------------------------------------------------------------------------- ${VAR} expansion


def test_env_expansion(tmp_path):
    p = write(
        tmp_path,
        """\
        name: t
        description: "costs $$5 and $HOME stays; ${WHO:-nobody}"
        server:
          backend: sglang
          python: ${PY:-python3}
          model_path: ${MODEL}
          tp_size: ${TP:-1}
          env: {A: "${EMPTY:-dflt}", B: "${EMPTY:-}"}  # ${EMPTY} alone: set but empty is an error
        variants:
          - name: off
        """,
    )
    s = load_scenario(p, {"MODEL": "/models/x", "TP": "2", "EMPTY": ""})
    assert s.description == "costs $5 and $HOME stays; nobody"
    assert s.server.python == "python3"
    assert s.server.model_path == "/models/x"
    assert s.server.tp_size == 2
    assert s.server.env == {"A": "dflt", "B": ""}


def test_env_unset_names_key_and_line(tmp_path):
    p = write(tmp_path, SGLANG_BASE.replace("model_path: m", "model_path: ${MODEL_PATH}"))
    errs = errors_of(p, {})
    assert errs == [
        f"{p}:4 server.model_path: environment variable MODEL_PATH is not set "
        "(give a default with ${MODEL_PATH:-default})"
    ]
    assert load_scenario(p, {"MODEL_PATH": "/m"}).server.model_path == "/m"


def test_env_expansion_cannot_inject_yaml(tmp_path):
    p = write(tmp_path, SGLANG_BASE.replace("model_path: m", "model_path: ${X}"))
    s = load_scenario(p, {"X": "a\nrepeats: 99\n[1"})
    assert s.repeats == 1 and s.server.model_path == "a\nrepeats: 99\n[1"


def test_env_bad_reference(tmp_path):
    line, path, msg = one_error(tmp_path, BASE.replace("model_path: m", "model_path: ${1X}"))
    assert (line, path) == (4, "server.model_path") and "bad variable reference" in msg
    line, path, msg = one_error(tmp_path, BASE.replace("model_path: m", "model_path: ${X"))
    assert "unterminated" in msg


def test_env_defaults_to_os_environ(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_MODEL", "/from/env")
    p = write(tmp_path, SGLANG_BASE.replace("model_path: m", "model_path: ${HARNESS_TEST_MODEL}"))
    assert load_scenario(p).server.model_path == "/from/env"


# ------------------------------------------------------------------------------ matrix


def test_matrix_names_and_count():
    s = load_scenario(FIX / "good_matrix.yaml", {})
    vs = s.expand_variants()
    assert len(vs) == 1 + 2 * 2 * 2
    assert [v.name for v in vs][:3] == ["off", "on-r1-page_first-REGCHUNK1", "on-r1-page_first-REGCHUNK256"]
    v = s.variant("on-r2-page_first_direct-REGCHUNK1")
    assert v.origin == "matrix[0]"
    assert v.hicache.ratio == 2 and v.hicache.mem_layout == "page_first_direct"
    assert v.hicache.write_policy == "write_through"
    assert v.env == {"SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB": "1"}
    assert v.matrix_values == {
        "hicache.ratio": 2,
        "hicache.mem_layout": "page_first_direct",
        "env.SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB": "1",
    }
    assert v.args == {"--max-total-tokens": 20480}


def test_matrix_default_labels(tmp_path):
    p = write(
        tmp_path,
        SGLANG_BASE
        + """\
matrix:
  - prefix: x
    axes:
      hicache.size_gb: [4, 1.5]
      env.SGLANG_HICACHE_HOST_ALLOC: [pin]
      args.--disable-overlap-schedule: [true, false]
      args.--chunked-prefill-size: [4096]
      model_path: [models/a, /abs/b]
    labels:
      model_path: "m{}"
""",
    )
    names = [v.name for v in load_scenario(p, {}).expand_variants()]
    assert names[1:] == [
        f"x-{s}gb-HOST_ALLOC_pin-{o}-chunked-prefill-size_4096-m{m}"
        for s in ("4", "1.5")
        for o in ("disable-overlap-schedule", "no-disable-overlap-schedule")
        for m in ("a", "b")
    ]
    v = load_scenario(p, {}).variant("x-4gb-HOST_ALLOC_pin-no-disable-overlap-schedule-chunked-prefill-size_4096-mb")
    assert "--disable-overlap-schedule" not in v.args and v.args["--chunked-prefill-size"] == 4096
    assert v.model_path == "/abs/b"


def test_matrix_bad_axis_value_points_at_value(tmp_path):
    body = BASE + "matrix:\n  - prefix: on\n    axes:\n      hicache.ratio:\n        - 1\n        - 0\n"
    line, path, msg = one_error(tmp_path, body)
    assert (line, path) == (
        12,
        'matrix[0].axes["hicache.ratio"][1]',
    ) and "expected a number in 0.01..1000 x the device KV pool, got 0" in msg


def test_matrix_bad_axis_path(tmp_path):
    body = BASE + "matrix:\n  - prefix: on\n    axes:\n      hicache.raito: [1]\n"
    line, path, msg = one_error(tmp_path, body)
    assert (line, path) == (10, 'matrix[0].axes["hicache.raito"]') and "unknown axis" in msg


def test_matrix_name_clash_with_explicit(tmp_path):
    body = BASE + "  - name: on-r1\nmatrix:\n  - prefix: on\n    axes: {hicache.ratio: [1]}\n"
    line, path, msg = one_error(tmp_path, body)
    assert (line, path) == (9, "matrix[0]") and "'on-r1' duplicates variants[1]" in msg


def test_matrix_empty_axis(tmp_path):
    body = BASE + "matrix:\n  - prefix: on\n    axes: {hicache.ratio: []}\n"
    line, path, msg = one_error(tmp_path, body)
    assert path == 'matrix[0].axes["hicache.ratio"]' and "at least 1" in msg


# ------------------------------------------------------------------------------ variants


def test_variant_merge_and_shorthand(tmp_path):
    p = write(
        tmp_path,
        """\
        name: t
        server:
          backend: sglang
          model_path: Qwen/Qwen3-8B
          args: {--a: 1, --b: true, --c: x}
          env: {E1: "1", E2: "2"}
        variants:
          - name: off
          - name: on
            hicache: true
            args: {--b: false, --a: 2, --d: [1, 2]}
            env: {E2: null, E3: 3}
        """,
    )
    s = load_scenario(p, {})
    off, on = s.expand_variants()
    assert off.hicache is None and off.args == {"--a": 1, "--b": True, "--c": "x"}
    assert on.hicache is not None and on.hicache.ratio is None and on.hicache.effective_ratio == 2.0
    assert list(on.args.items()) == [("--a", 2), ("--c", "x"), ("--d", [1, 2])]
    assert on.env == {"E1": "1", "E3": "3"}
    assert on.flag_argv() == ["--enable-hierarchical-cache", "--a", "2", "--c", "x", "--d", "1", "2"]
    assert on.model_path == "Qwen/Qwen3-8B"  # a repo id, not a path next to the scenario


def test_relative_paths_resolve_against_scenario_dir(tmp_path):
    for d in ("sub/models/llama-tiny", "elsewhere"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "config.json").write_text((tmp_path / "m" / "config.json").read_text())
    p = write(
        tmp_path / "sub",
        """\
        name: t
        server:
          backend: sim
          model_path: models/llama-tiny
        variants:
          - name: off
          - name: other
            model_path: ../elsewhere
        """,
    )
    s = load_scenario(p, {})
    assert s.variant("off").model_path == str(tmp_path / "sub" / "models" / "llama-tiny")
    assert s.variant("other").model_path == str(tmp_path / "elsewhere")
    assert s.variant("other").model_path_spec == "../elsewhere"
    assert s.server.sim is not None  # filled with defaults for backend sim


def test_expect_and_sim_faults(tmp_path):
    p = write(
        tmp_path,
        BASE + "  - name: bad\n    hicache: {mem_layout: layer_first}\n    expect: startup_failed\n"
        "    expect_cause: assertion\n    sim_faults: [crash_at_request=3]\n",
    )
    v = load_scenario(p, {}).variant("bad")
    assert (v.expect, v.expect_cause, v.sim_faults) == ("startup_failed", "assertion", ["crash_at_request=3"])


# ------------------------------------------------------------------------------ types


def test_token_size():
    assert TokenSize.parse(75000).resolve(10) == 75000
    assert TokenSize.parse("8k").tokens == 8000
    t = TokenSize.parse("0.4x pool")
    assert t.relative and t.resolve(20480) == 8192 and str(t) == "0.4x pool"
    assert TokenSize.parse("2 x pool").resolve(4096) == 8192
    for bad in (0, -3, "x pool", "0x pool", True, None, 1.5, "many"):
        with pytest.raises(ValueError):
            TokenSize.parse(bad)
    with pytest.raises(ValueError):
        t.resolve(None)


def test_check_parse_and_evaluate():
    c = Check.parse("on-r1: parallel_prefixes.second_pass_speedup >= 2")
    assert (c.variant, c.metric, c.op, c.value) == ("on-r1", "parallel_prefixes.second_pass_speedup", ">=", 2.0)
    assert c.evaluate(3.2) and not c.evaluate(1.9) and not c.evaluate(None)
    c = Check.parse("cold.prefill_penalty <= 5%")
    assert c.variant is None and c.value == pytest.approx(0.05)
    c = Check.parse("on-r1: quality.parity == PASS")
    assert c.value == "PASS" and c.evaluate("PASS") and not c.evaluate("FAIL")
    assert Check.parse("x: m != 'WARN'").evaluate("PASS")
    assert Check.parse("m > 2x").value == 2.0


def test_workload_types_and_defaults(tmp_path):
    p = write(
        tmp_path,
        BASE + "workloads:\n  - kind: cold_prefill\n    name: cold\n    prompt_tokens: 0.5x pool\n  - kind: decode\n",
    )
    s = load_scenario(p, {})
    cold, dec = s.workloads
    assert isinstance(cold, ColdPrefill) and cold.name == "cold" and cold.prompt_tokens.resolve(1000) == 500
    assert cold.max_new_tokens == 1 and cold.warmup == 1 and cold.api == "generate"
    assert isinstance(dec, Decode) and dec.name == "decode" and dec.output_tokens == 256
    assert s.workload("cold") is cold
    assert s.expectations.thresholds == {}
    dumped = s.model_dump(mode="json")
    assert dumped["workloads"][0]["prompt_tokens"] == "0.5x pool"


def test_thresholds_parsed(tmp_path):
    p = write(tmp_path, BASE + "expectations:\n  thresholds:\n    ttft_p50: 5%\n    decode_tok_s: '2.5 %'\n")
    th = load_scenario(p, {}).expectations.thresholds
    assert th["ttft_p50"].fraction == pytest.approx(0.05) and th["decode_tok_s"].fraction == pytest.approx(0.025)


# ------------------------------------------------------------------------------ hashes


def _hashes(tmp_path, body, name="s.yaml"):
    s = load_scenario(write(tmp_path, body, name), {})
    return {v.name: variant_config_hash(s, v) for v in s.expand_variants()}


HASH_BASE = """\
name: t
description: first
server:
  backend: sglang
  model_path: models/x
  args: {--max-total-tokens: 4096}
variants:
  - name: off
  - name: on
    description: a
    hicache: {ratio: 2}
"""


def test_config_hash_stable_under_irrelevant_changes(tmp_path):
    h1 = _hashes(tmp_path, HASH_BASE)
    changed = (
        HASH_BASE.replace("description: first", "description: second").replace("description: a", "description: b")
        + "repeats: 3\nworkloads:\n  - kind: decode\n"
    )
    assert _hashes(tmp_path, changed, "other.yaml") == h1
    (tmp_path / "elsewhere").mkdir()
    assert _hashes(tmp_path / "elsewhere", HASH_BASE) == h1  # another checkout folder
    assert h1["off"] != h1["on"]


def test_config_hash_changed_by_server_settings(tmp_path):
    h1 = _hashes(tmp_path, HASH_BASE)
    h2 = _hashes(tmp_path, HASH_BASE.replace("4096", "8192"), "b.yaml")
    assert h2["off"] != h1["off"] and h2["on"] != h1["on"]
    h3 = _hashes(tmp_path, HASH_BASE.replace("ratio: 2", "ratio: 1"), "c.yaml")
    assert h3["off"] == h1["off"] and h3["on"] != h1["on"]
    h4 = _hashes(tmp_path, HASH_BASE.replace("  args:", "  env: {X: '1'}\n  args:"), "d.yaml")
    assert h4["off"] != h1["off"]


def test_scenario_hash():
    assert scenario_hash("a") == scenario_hash(b"a") != scenario_hash("b")
    assert len(scenario_hash("")) == 64


# ------------------------------------------------------------------------------ shipped


@pytest.mark.parametrize(
    "name,env",
    [
        ("sim_smoke.yaml", {}),
        ("wsl_tp2.yaml", {"MODEL_PATH": "/models/gdn-27b"}),
        ("h200_smoke.yaml", {}),
    ],
)
def test_shipped_scenarios_load(name, env):
    s = load_scenario(ROOT / "scenarios" / name, env)
    vs = s.expand_variants()
    assert vs and len({v.name for v in vs}) == len(vs)
    assert s.text == (ROOT / "scenarios" / name).read_text()
    assert s.path == ROOT / "scenarios" / name
    if s.quality.enabled:
        assert s.quality.baseline_variant in {v.name for v in vs}


def test_sim_smoke_contents():
    s = load_scenario(ROOT / "scenarios" / "sim_smoke.yaml", {})
    by = {v.name: v for v in s.expand_variants()}
    assert by["off"].model_path == str(ROOT / "scenarios" / "models" / "llama-tiny")
    bad = [v for v in by.values() if v.expect == "startup_failed"]
    assert {v.expect_cause for v in bad} == {"assertion", "host_memory"}
    lf = next(v for v in bad if v.expect_cause == "assertion")
    assert lf.hicache.mem_layout == "layer_first" and "qwen3next" in lf.model_path
    assert [w.kind for w in s.workloads] == [
        "cold_prefill",
        "repeat_prefill",
        "parallel_prefixes",
        "short_ttft",
        "decode",
    ]


def test_wsl_needs_model_path():
    errs = errors_of(ROOT / "scenarios" / "wsl_tp2.yaml", {})
    assert len(errs) == 1 and "server.model_path: environment variable MODEL_PATH is not set" in errs[0]


def test_json_schema():
    sch = json_schema()
    assert "name" not in sch["required"] and "server" in sch["required"]
    assert set(sch["properties"]) >= {"server", "variants", "matrix", "workloads", "sampling", "quality"}
    import json

    json.dumps(sch)


def test_load_scenario_text():
    s = load_scenario_text(SGLANG_BASE, "mem.yaml", env={})
    assert s.name == "t" and s.text == SGLANG_BASE
    with pytest.raises(ScenarioError) as ei:
        load_scenario_text(SGLANG_BASE + "bogus: 1\n", "mem.yaml", env={})
    assert ei.value.errors[0].startswith("mem.yaml:7 bogus: unknown key 'bogus'")


def test_name_defaults_to_file_stem(tmp_path):
    p = write(tmp_path, BASE.replace("name: t\n", ""), "my_scn.yaml")
    assert load_scenario(p, {}).name == "my_scn"


def test_doc_example_validates():
    doc = (ROOT / "docs" / "scenario-format.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", doc, re.S).group(1)
    s = load_scenario_text(example, "doc.yaml", env={"MODEL_PATH": "/m"})
    names = [v.name for v in s.expand_variants()]
    assert names[:2] == ["off", "on-r2"] and "on-r1-page_first-REGCHUNK1" in names
    # the format's example shows every declared workload kind, once
    from harness.workloads import kinds

    assert sorted(w.kind for w in s.workloads) == sorted(kinds())


def test_variant_names_sharing_a_results_folder_are_rejected(tmp_path):
    """``on@1`` and ``on_1`` are different names but one results folder (results.safe_name): the
    second variant would append to the first one's requests.jsonl and overwrite its status."""
    line, path, msg = one_error(
        tmp_path,
        """\
        name: t
        server:
          backend: sim
          model_path: m
        variants:
          - name: on@1
          - name: on_1
        """,
    )
    assert (line, path) == (7, "variants[1].name")
    assert "'on_1' and 'on@1' would share the results folder 'on_1'" in msg


def test_env_set_but_empty_names_the_variable(tmp_path):
    """An unset GitHub Actions variable arrives as an empty string: say which one."""
    p = write(tmp_path, SGLANG_BASE.replace("model_path: m", "model_path: ${MODEL_PATH}"))
    assert errors_of(p, {"MODEL_PATH": ""}) == [
        f"{p}:4 server.model_path: environment variable MODEL_PATH is set but empty (give it a value, "
        "or a default with ${MODEL_PATH:-default})"
    ]


def test_gate_names_are_checked_against_the_declarations(tmp_path):
    p = write(
        tmp_path,
        BASE
        + """\
workloads:
  - {kind: parallel_prefixes, k: 2, prompt_tokens: 100}
  - {kind: cold_prefill, prompt_tokens: 100}
gate:
  - parallel_prefixes.second_pass_speedup
  - "off: cold_prefill.cold.ttft_ms"
  - parallel_prefixes.second_pass_speedpu
  - cold_prefil.cold.ttft_ms
  - "of: cold_prefill.cold.ttft_ms"
  - cold_prefill.cold.ttft
  - quality.parity
""",
    )
    errs = errors_of(p)
    assert [e.split(" ", 1)[1] for e in errs] == [
        "gate[2]: parallel_prefixes compares no derived figure 'second_pass_speedpu' (did you mean "
        "'second_pass_speedup'?)",
        "gate[3]: unknown workload 'cold_prefil' (did you mean 'cold_prefill'?)",
        "gate[4]: unknown variant 'of' (did you mean 'off'?)",
        "gate[5]: no compared metric 'ttft' (did you mean 'ttft_ms'?)",
        "gate[6]: quality.parity gates nothing: quality is not enabled",
    ]
    good = load_scenario(
        write(
            tmp_path,
            BASE + "workloads: [{kind: cold_prefill, prompt_tokens: 100}]\ngate: [cold_prefill.cold.ttft_ms]\n",
            "g.yaml",
        ),
        {},
    )
    assert [(g.variant, g.metric) for g in good.gate] == [(None, "cold_prefill.cold.ttft_ms")]


def test_churn_tokens_zero_is_churn_off_as_docs_quality_says(tmp_path):
    """docs/quality.md: `churn_tokens: 0` makes every re-ask a device hit (parity NOT_EXERCISED);
    validate refused it ("must be >= 1 token"). -1 is still refused."""
    s = load_scenario_text(SGLANG_BASE + "quality:\n  enabled: true\n  churn_tokens: 0\n", "c.yaml", env={})
    assert s.quality.churn_tokens.resolve(4096) == 0
    line, path, msg = one_error(tmp_path, BASE + "quality:\n  enabled: true\n  churn_tokens: -1\n")
    assert path == "quality.churn_tokens" and "must be >= 1 token" in msg
