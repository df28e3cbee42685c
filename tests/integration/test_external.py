"""backend: external — measuring sglang servers the harness did not start (harness/run/external.py).

The servers are simulated servers started here, outside the harness (``SimProcess``), shared by
the module's tests; a server that is not sglang is a tiny stdlib HTTP server."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import signal
import textwrap
import threading
from pathlib import Path

import httpx
import pytest

from harness.core.exit_codes import ExitCode
from harness.report.memory_table import memory_table
from harness.report.view import load_view
from harness.run import external
from harness.scenario import ScenarioError, load_scenario_text, variant_config_hash
from harness.scenario.urls import parse_url_args, scenario_with_urls
from harness.server.identify import NotSglangError, identify_sglang
from harness.sim.testing import SimProcess, free_port
from harness.store import results
from harness.store.secrets import is_secret_name
from tests.conftest import (
    TINY_QUALITY,
    only_run,
    run_harness,
    sim_scenario,
    start_harness,
    wait_state,
    write_scenario,
)

API_KEY = "sekrit-api-key-4711"
POOL = ["--max-total-tokens", "8192", "--skip-tokenizer-init", "--enable-metrics"]


@pytest.fixture(scope="module")
def servers():
    """Two running simulated servers: HiCache off, and on (ratio 2) with an API key in its args."""
    with SimProcess(POOL, time_scale=0.01) as off:
        with SimProcess([*POOL, "--enable-hierarchical-cache", "--hicache-ratio", "2", "--api-key", API_KEY]) as on:
            yield off, on


def external_text(off_url: str, on_url: str, quality: bool = True, extra: str = "") -> str:
    text = textwrap.dedent(f"""\
        name: ext
        server:
          backend: external
          request_timeout_s: 30
          liveness_idle_s: 0
        sampling: {{interval_s: 0.2, idle_window_s: 0}}
        variants:
          - name: "off"
            url: {off_url}
          - name: "on"
            url: {on_url}
        workloads:
          - kind: cold_prefill
            n: 2
            prompt_tokens: 256
        """)
    if quality:
        text += TINY_QUALITY.replace('  baseline_variant: "off"\n', "")  # read from the servers' args
    return text + extra


class NotSglang(http.server.BaseHTTPRequestHandler):
    """vLLM's shape: an OpenAI /v1/models list owned by vllm, 404 for sglang's own endpoints."""

    answers: dict[str, tuple[int, str, bytes]] = {
        "/v1/models": (200, "application/json", json.dumps({"data": [{"id": "m", "owned_by": "vllm"}]}).encode()),
    }

    def do_GET(self):  # noqa: N802 - http.server's name
        status, ctype, body = self.answers.get(self.path, (404, "text/plain", b"Not Found"))
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def other_server():
    """A running HTTP server that is not sglang; ``answers`` can be changed per test."""
    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type("H", (NotSglang,), {"answers": dict(NotSglang.answers)})
    )
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


class ApiKeyProxy(http.server.BaseHTTPRequestHandler):
    """sglang's ``--api-key`` in front of a simulated server: 401 without ``Authorization: Bearer
    <key>``, else the server's answer (its body whole). Every request is kept in ``seen`` as
    (method, path, authorized)."""

    protocol_version = "HTTP/1.1"  # kept-alive, as the harness's client expects
    upstream = ""
    key = ""
    seen: list[tuple[str, str, bool]] = []

    def _forward(self, method: str) -> None:
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else None
        ok = self.headers.get("authorization") == f"Bearer {self.key}"
        self.seen.append((method, self.path.split("?")[0], ok))
        status, ctype, payload = 401, "application/json", b'{"error": "Unauthorized"}'
        if ok:
            headers = {"content-type": self.headers.get("content-type") or "application/json"}
            r = httpx.request(method, self.upstream + self.path, content=body, headers=headers, timeout=60)
            status, ctype, payload = r.status_code, r.headers.get("content-type", ""), r.content
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):  # noqa: N802 - http.server's name
        self._forward("GET")

    def do_POST(self):  # noqa: N802
        self._forward("POST")

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def api_key_proxy(upstream: str, key: str):
    """(its URL, the requests it saw) of an `ApiKeyProxy` in front of ``upstream``."""
    seen: list[tuple[str, str, bool]] = []
    handler = type("H", (ApiKeyProxy,), {"upstream": upstream, "key": key, "seen": seen})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


# ------------------------------------------------------------------------------- the scenario


def load(text: str):
    return load_scenario_text(text, "ext.yaml")


def test_external_block_loads_with_urls_and_no_model_path():
    scn = load(external_text("http://gpu-a:30000/", "https://gpu-b.example:8443/sglang", quality=False))
    off, on = scn.expand_variants()
    assert (off.backend, off.url, on.url) == ("external", "http://gpu-a:30000", "https://gpu-b.example:8443/sglang")
    assert off.hicache is None and off.model_path == ""
    # the config hash is the URL: the server's own arguments are recorded per run instead
    assert variant_config_hash(scn, off) != variant_config_hash(scn, on)


@pytest.mark.parametrize(
    "edit,path,message",
    [
        ("server:\n  backend: external\n  tp_size: 2\n", "server.tp_size", "does not apply to backend: external"),
        ("server:\n  backend: external\n  args: {--x: 1}\n", "server.args", "running server's own setting"),
        ('  - name: "on"\n    hicache: {ratio: 2}\n', "variants[1].hicache", "read from the server's own arguments"),
        ('  - name: "on"\n    expect: startup_failed\n', "variants[1].expect", "cannot fail to start"),
        ("preflight: {mode: strict}\n", "preflight", "no host-pool prediction"),
        ("sampling: {cooldown_timeout_s: 3}\n", "sampling.cooldown_timeout_s", "no cooldown"),
        ('  - name: "on"\n    url: null\n', "variants[1]", "needs url:"),
    ],
)
def test_launch_knobs_are_refused_naming_the_key(edit, path, message):
    text = external_text("http://a:1", "http://b:2", quality=False)
    head = edit.split("\n", 1)[0]
    if head.startswith("server:"):
        text = text.replace("server:\n  backend: external\n", edit)
    elif head.startswith('  - name: "on"'):
        text = text.replace(
            '  - name: "on"\n    url: http://b:2\n', edit + ("    url: http://b:2\n" if "url" not in edit else "")
        )
    elif head.startswith("sampling:"):
        text = text.replace("sampling: {interval_s: 0.2, idle_window_s: 0}\n", edit)
    else:
        text += edit
    with pytest.raises(ScenarioError) as exc:
        load(text)
    assert any(f" {path}: " in line and message in line for line in exc.value.lines), exc.value.lines


def test_api_key_env_is_a_variable_name_and_only_for_running_servers():
    text = external_text("http://a:1", "http://b:2", quality=False)
    with_env = lambda name: text.replace("backend: external\n", f"backend: external\n  api_key_env: {name}\n")
    assert load(with_env("MY_SGLANG_KEY")).server.api_key_env == "MY_SGLANG_KEY"
    with pytest.raises(ScenarioError) as exc:
        load(with_env("sk-live-123"))  # a key pasted where its variable's name goes
    assert any(" server.api_key_env: " in x and "never the key itself" in x for x in exc.value.lines)
    assert "sk-live-123" not in "\n".join(exc.value.lines)
    with pytest.raises(ScenarioError) as exc:
        load_scenario_text(
            "name: s\nserver: {backend: sglang, model_path: /m, api_key_env: K}\nvariants: [{name: a}]\n"
            "workloads: [{kind: cold_prefill, n: 1, prompt_tokens: 256}]\n",
            "s.yaml",
            env={},
        )
    assert any(" server.api_key_env: only allowed with backend: external" in x for x in exc.value.lines)


@pytest.mark.parametrize(
    "url,message",
    [
        ("ftp://a:1", "not an http:// or https:// URL"),
        ("http://user:pw@a:1", "credentials in the URL"),
        ("http://a:1/?x=1", "no query or fragment"),
        ("http://bad host:1", "not"),
    ],
)
def test_bad_urls_are_refused(url, message):
    with pytest.raises(ScenarioError) as exc:
        load(external_text(url, "http://b:2", quality=False))
    assert any("variants[0].url" in line and message in line for line in exc.value.lines), exc.value.lines


def test_url_only_with_backend_external():
    text = sim_scenario('- name: "off"\n  url: http://a:1\n')
    with pytest.raises(ScenarioError) as exc:
        load_scenario_text(text, "s.yaml", base_dir=Path(__file__).parents[2] / "scenarios")
    assert any("variants[0].url: only allowed with backend: external" in line for line in exc.value.lines)


# ------------------------------------------------------------------------------- the servers


def test_off_and_on_servers_measured_with_parity_and_left_running(servers, tmp_path):
    off, on = servers
    path = write_scenario(tmp_path, external_text(off.url, on.url + "/"))
    r = run_harness("run", path, "--results-dir", tmp_path / "results", "--reports-dir", tmp_path / "reports")
    assert r.returncode == ExitCode.OK, r.stdout + r.stderr
    assert "HiCache off" in r.stderr and "HiCache on (ratio 2" in r.stderr
    # attached, not launched: the progress lines, the samples and the report say so
    assert "variant 1/2 off | attaching" in r.stderr and "launching" not in r.stderr, r.stderr
    assert "report:" in r.stdout and "could not write the report" not in r.stderr  # the report draws it
    page = next((tmp_path / "reports").rglob("index.html")).read_text()
    assert f"running server {on.url} (sglang " in page
    assert page.count("<td>attached</td>") == 2 and "t = 0 when the harness attached to the server" in page
    run = only_run(tmp_path / "results")
    manifest = results.read_json(run / "manifest.json")
    assert manifest["backend"] == "external" and manifest["quality_baseline"] == "off"
    assert manifest["simulated"] is True  # the servers say they are simulated: the run says so too
    entries = {v["name"]: v for v in manifest["variants"]}
    # HiCache as each server reports it, and the server's own arguments and version
    assert entries["off"]["hicache"] is None and entries["on"]["hicache"]["ratio"] == 2
    for name, sim in (("off", off), ("on", on)):
        server = entries[name]["server"]
        assert server["url"] == sim.url and server["version"] and server["identified_by"] == "/get_server_info"
        assert server["args"]["max_total_num_tokens"] == 8192 and server["metrics"] == "available"
        assert server["local"] is True and server["host_sampling"] == "the server's host"
        assert entries[name]["argv"] == []
    assert entries["on"]["server"]["args"]["enable_hierarchical_cache"] is True
    # kv_bytes_per_token is a size, not a secret; the API key is one, and is nowhere in the run
    assert isinstance(entries["on"]["server"]["args"]["kv_bytes_per_token"], int)
    assert entries["on"]["server"]["args"]["api_key"] == "***"
    for f in run.rglob("*"):
        if f.is_file():
            assert API_KEY not in f.read_text(errors="replace"), f
    # no lifecycle: nothing stopped, no preflight, no cooldown; the servers still serve
    for name in ("off", "on"):
        status = results.read_json(run / name / "status.json")
        assert status["state"] == "ok"
        assert status["server"] == {"url": entries[name]["url"], "external": True}
        assert status.get("stop") is None and status.get("cooldown") is None and status["preflight"] is None
        summary = results.read_json(run / name / "summary.json")
        assert summary["sampling"]["host"] == "the server's host" and summary["sampling"]["server_metrics"] == "sampled"
        samples = list(results.read_jsonl(run / name / "samples.jsonl"))
        assert any(s["counters"] for s in samples), "the server's /metrics were sampled"
        assert "startup" not in {s["phase"] for s in samples}  # "attached" until the first workload
    assert results.read_json(run / "on" / "summary.json")["quality"]["parity"]["verdict"] == "PASS"
    for sim in servers:
        assert sim.proc.poll() is None
        assert httpx.get(sim.url + "/health", timeout=5).status_code == 200


def test_one_server_runs_the_workloads_and_says_in_one_line_that_parity_needs_two(servers, tmp_path):
    """README's `harness run SCENARIO --url URL` (one server: no OFF/ON pair) used to exit 2."""
    off, on = servers
    path = write_scenario(tmp_path, external_text(on.url, on.url))
    r = run_harness("run", path, "--results-dir", tmp_path / "results", "--no-report")
    assert r.returncode == ExitCode.OK, r.stdout + r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if "parity" in ln]
    assert "no quality parity: it needs one server with HiCache off and one with it on" in line
    run = only_run(tmp_path / "results")
    assert "needs one server with HiCache off" in results.read_json(run / "manifest.json")["parity_skipped"]
    for name in ("off", "on"):
        rows = list(results.read_jsonl(run / name / "requests.jsonl"))
        assert rows and all(r["error"] is None for r in rows)
        assert not list(results.read_jsonl(run / name / "quality.jsonl"))  # no question asked


def test_declared_baseline_must_be_off_on_its_server(servers, tmp_path):
    off, on = servers
    text = external_text(off.url, on.url, extra="")
    text = text.replace("quality:\n", 'quality:\n  baseline_variant: "on"\n')
    r = run_harness("run", write_scenario(tmp_path, text), "--results-dir", tmp_path / "results")
    assert r.returncode == ExitCode.BAD_INPUT
    assert "baseline_variant on must be a server with HiCache off" in r.stderr


def test_a_server_that_is_not_sglang_is_refused_before_any_request(servers, other_server, tmp_path):
    srv, url = other_server
    off, _ = servers
    path = write_scenario(tmp_path, external_text(off.url, url, quality=False))
    r = run_harness("run", path, "--results-dir", tmp_path / "results")
    assert r.returncode == ExitCode.BAD_INPUT, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines == [
        f"harness: variant on: {url} is not an sglang server: /get_server_info answered 404; "
        "/server_info answered 404; /v1/models lists models owned by 'vllm'"
    ]
    assert not (tmp_path / "results").exists()


def test_identify_sglang_says_what_it_saw(servers, other_server):
    srv, url = other_server
    handler = srv.RequestHandlerClass
    with pytest.raises(NotSglangError, match="answered 404; /server_info answered 404; /v1/models lists"):
        identify_sglang(url)
    handler.answers["/get_server_info"] = (200, "text/html", b"<html>hello</html>")
    handler.answers["/v1/models"] = (404, "text/plain", b"")
    with pytest.raises(NotSglangError, match="/get_server_info answered 200 with text/html that is not JSON"):
        identify_sglang(url)
    handler.answers["/get_server_info"] = (200, "application/json", b'{"status": "ok"}')
    with pytest.raises(NotSglangError, match="JSON without sglang's server arguments \\('status'\\)"):
        identify_sglang(url)
    # an sglang whose /get_server_info is gone still lists its models as sglang's: accepted, args unknown
    handler.answers["/v1/models"] = (200, "application/json", b'{"data": [{"id": "m", "owned_by": "sglang"}]}')
    found = identify_sglang(url)
    assert found.path == "/v1/models" and found.info is None
    handler.answers["/get_server_info"] = (401, "application/json", b'{"error": "unauthorized"}')
    handler.answers["/v1/models"] = (401, "application/json", b'{"error": "unauthorized"}')
    with pytest.raises(
        NotSglangError, match="answered 401 \\(it wants credentials: server.api_key_env names the variable"
    ):
        identify_sglang(url)
    with pytest.raises(NotSglangError, match="nothing answers"):
        identify_sglang(f"http://127.0.0.1:{free_port()}")
    found = identify_sglang(servers[1].url)
    assert found.info.hicache.enabled is True and found.info.simulated


def test_remote_host_memory_is_marked_this_machine():
    assert external.url_is_local("http://127.0.0.1:30000") and external.url_is_local("http://localhost:1")
    assert not external.url_is_local("http://192.0.2.7:30000")  # TEST-NET-1: never this machine
    e = external.Endpoint("on", "http://192.0.2.7:30000", "/get_server_info", None, None, False)
    assert e.host_sampling == "this machine" == e.manifest_entry(lambda d: d)["host_sampling"]
    assert "host memory is sampled on this machine" in external.AttachedRun({"on": e}, []).notes()[0]


def test_the_report_marks_host_memory_of_a_remote_server(servers, tmp_path):
    off, on = servers
    text = external_text(off.url, on.url, quality=False)
    r = run_harness("run", write_scenario(tmp_path, text), "--results-dir", tmp_path / "results", "--no-report")
    assert r.returncode == ExitCode.OK, r.stdout + r.stderr
    run = only_run(tmp_path / "results")
    summary = results.read_json(run / "on" / "summary.json")  # as a remote server's run writes it
    summary["sampling"].update(host="this machine", server_host_sampled=False)
    results.write_json_atomic(run / "on" / "summary.json", summary)
    row = next(r for r in memory_table(load_view(run)) if r.label == "host memory sampled on")
    assert [c.text for c in row.cells] == ["the server's host", "this machine"]
    assert row.cells[1].css == "bad"


# ------------------------------------------------------------------------------- --url


def test_run_url_uses_a_scenarios_workloads_without_editing_it(servers, tmp_path):
    off, on = servers
    sim_text = sim_scenario(
        '- name: "off"\n- name: on-r2\n  hicache: {ratio: 2}\n',
        "- kind: cold_prefill\n  n: 2\n  prompt_tokens: 256\n",
        name="launched",
        extra='expectations:\n  checks: ["on-r2: cold_prefill.cold.ttft_ms_p50 < 1000000"]\n',
    )
    path = write_scenario(tmp_path, sim_text)
    r = run_harness(
        "run", path, "--url", f"off={off.url}", "--url", f"on={on.url}", "--results-dir", tmp_path / "results"
    )
    assert r.returncode == ExitCode.OK, r.stdout + r.stderr
    run = only_run(tmp_path / "results")
    assert run.parent.name == "launched-url"  # apart from the scenario's own runs
    manifest = results.read_json(run / "manifest.json")
    assert [(v["name"], v["url"]) for v in manifest["variants"]] == [("off", off.url), ("on", on.url)]
    assert '"backend": "external"' in manifest["scenario"]["text"]  # the exact scenario it ran
    assert "on-r2" not in manifest["scenario"]["text"]  # a check naming a variant the URLs lack is set aside
    # ... and reported as not evaluated, never dropped silently
    assert "not evaluated: 'on-r2: cold_prefill.cold.ttft_ms_p50 < 1000000': names a variant" in r.stderr
    (unrun,) = [c for c in results.read_json(run / "expectations.json")["checks"] if c["variant"] == "on-r2"]
    assert unrun["outcome"] == "skipped" and unrun["reason"].startswith("not evaluated: names a variant this --url run")
    rows = list(results.read_jsonl(run / "on" / "requests.jsonl"))
    assert [r["phase"] for r in rows] == ["warmup", "cold", "cold"] and all(r["error"] is None for r in rows)


def test_url_arguments():
    assert parse_url_args(["http://a:1/"]) == [("server", "http://a:1")]
    assert parse_url_args(["http://a:1", "on=http://b:2"]) == [("server", "http://a:1"), ("on", "http://b:2")]
    assert parse_url_args(["http://a:1", "http://b:2"]) == [("server1", "http://a:1"), ("server2", "http://b:2")]
    with pytest.raises(ValueError, match="given twice"):
        parse_url_args(["x=http://a:1", "x=http://b:1"])
    with pytest.raises(ValueError, match="--url a=gopher://x: 'gopher://x' is not an http"):
        parse_url_args(["a=gopher://x"])
    # without a scenario: the bundled scenarios/external.yaml's workloads
    scn = scenario_with_urls(None, [("server", "http://a:1")])
    assert scn.name == "external" and [v.url for v in scn.expand_variants()] == ["http://a:1"]
    assert [w.kind for w in scn.workloads] == ["cold_prefill", "repeat_prefill", "short_ttft", "decode"]


def test_secret_names_do_not_swallow_per_token_sizes():
    assert not is_secret_name("kv_bytes_per_token") and not is_secret_name("max_total_tokens")
    assert is_secret_name("api_key") and is_secret_name("hf_token") and is_secret_name("--api-key")


def test_metrics_that_do_not_answer_are_said_so(other_server):
    _, url = other_server
    problem = external.metrics_problem(url)
    assert problem == "/metrics answered 404 (the server needs --enable-metrics)"
    e = external.Endpoint("off", url, "/v1/models", None, problem, True)
    assert e.manifest_entry(lambda d: d)["metrics"] == f"unavailable: {problem}"
    note = external.AttachedRun({"off": e}, []).notes()[0]
    assert f"no /metrics sampling ({problem})" in note and "its arguments are not recorded" in note


def test_the_formats_external_example_validates():
    doc = (Path(__file__).parents[2] / "docs" / "scenario-format.md").read_text()
    # the section's own example: the block whose server is external (the full listing names the
    # backend in a comment)
    example = next(
        b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if re.search(r"^\s*backend: external\s*$", b, re.M)
    )
    scn = load_scenario_text("name: doc\n" + example, "doc.yaml", env={})
    assert [(v.name, v.url) for v in scn.expand_variants()] == [
        ("off", "http://gpu-a:30000"),
        ("on", "http://gpu-b:30000"),
    ]


@pytest.mark.slow
def test_interrupt_leaves_the_servers_running_and_resume_asks_them_again(tmp_path):
    with (
        SimProcess(POOL, time_scale=0.5) as off,
        SimProcess([*POOL, "--enable-hierarchical-cache"], time_scale=0.5) as on,
    ):
        text = external_text(off.url, on.url, quality=False).replace("n: 2\n", "n: 20\n")
        path = write_scenario(tmp_path, text)
        proc = start_harness("run", path, "--results-dir", tmp_path / "results", "--no-report")
        run = wait_state(tmp_path / "results", "on", "running", proc)
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == ExitCode.INTERRUPTED, out
        assert "leaving the running servers as they are" in out
        assert off.proc.poll() is None and on.proc.poll() is None  # nothing of theirs was stopped
        r = run_harness("run", path, "--resume", run, "--no-report")
        assert r.returncode == ExitCode.OK, r.stdout + r.stderr
        assert "on: " + on.url + " is sglang" in r.stderr  # asked again before the rerun
        assert results.read_json(run / "on" / "status.json")["state"] == "ok"


KEY_ENV = "HARNESS_TEST_EXTERNAL_API_KEY"  # never set outside these tests
KEY = "proxy-key-0x5eed-4711"


def test_a_server_with_an_api_key_gets_it_on_every_request_from_the_named_variable(servers, tmp_path):
    """server.api_key_env names the variable holding the key: every request — probes,
    /get_server_info, /generate, /metrics, /flush_cache, health — carries it; the manifest says
    which variable, and no file of the run or its report holds the key. Unset: one line, exit 2;
    no api_key_env: the refusal says how to give one."""
    off, on = servers
    assert KEY_ENV not in os.environ
    with api_key_proxy(off.url, KEY) as (url, seen):
        text = external_text(url, on.url, quality=False).replace(
            "backend: external\n", f"backend: external\n  api_key_env: {KEY_ENV}\n"
        )
        text = text.replace("prompt_tokens: 256\n", "prompt_tokens: 256\n    flush_before: true\n")
        path = write_scenario(tmp_path, text)
        args = ("run", path, "--results-dir", tmp_path / "results", "--reports-dir", tmp_path / "reports")
        unset = run_harness(*args)
        assert unset.returncode == ExitCode.BAD_INPUT, unset.stdout + unset.stderr
        assert [x for x in unset.stderr.splitlines() if x.strip()] == [
            f"harness: server.api_key_env: environment variable {KEY_ENV} is not set "
            "(it must hold the servers' --api-key)"
        ]
        assert not seen and not (tmp_path / "results").exists()  # refused before any request
        wrong = run_harness(*args, env={KEY_ENV: "not-the-key"})
        assert wrong.returncode == ExitCode.BAD_INPUT and "answered 401 (it refused the API key sent" in wrong.stderr
        seen.clear()
        r = run_harness(*args, env={KEY_ENV: KEY})
        assert r.returncode == ExitCode.OK, r.stdout + r.stderr
        assert seen and all(ok for _, _, ok in seen), [s for s in seen if not s[2]]
        paths = {p for _, p, _ in seen}
        assert {"/get_server_info", "/generate", "/metrics", "/flush_cache", "/health_generate"} <= paths, paths
        bare = write_scenario(tmp_path / "bare", external_text(url, on.url, quality=False))
        refused = run_harness("run", bare, "--results-dir", tmp_path / "bare-results")
        assert refused.returncode == ExitCode.BAD_INPUT
        assert "answered 401 (it wants credentials: server.api_key_env names the variable" in refused.stderr
    run = only_run(tmp_path / "results")
    entries = {v["name"]: v for v in results.read_json(run / "manifest.json")["variants"]}
    assert entries["off"]["server"]["api_key_from_env"] == KEY_ENV
    assert results.read_json(run / "off" / "status.json")["state"] == "ok"
    files = [f for root in (run, tmp_path / "reports") for f in root.rglob("*") if f.is_file()]
    assert len(files) > 5
    for f in files:
        assert KEY not in f.read_text(errors="replace"), f


class ChangingProxy(ApiKeyProxy):
    """A server that turns into another between answers: once it has served a /generate, its
    /get_server_info says HiCache on and twice the pool (restarted with other arguments)."""

    generated: list[int] = []

    def _forward(self, method: str) -> None:
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else None
        path = self.path.split("?")[0]
        if path == "/generate":
            self.generated.append(1)
        headers = {"content-type": self.headers.get("content-type") or "application/json"}
        r = httpx.request(method, self.upstream + self.path, content=body, headers=headers, timeout=60)
        payload = r.content
        if path == "/get_server_info" and self.generated:
            info = json.loads(payload)
            info.update(enable_hierarchical_cache=True, max_total_num_tokens=2 * info["max_total_num_tokens"])
            payload = json.dumps(info).encode()
        self.send_response(r.status_code)
        self.send_header("content-type", r.headers.get("content-type", ""))
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def test_an_attached_server_that_changes_identity_fails_its_variant_as_server_changed(servers, tmp_path):
    """HiCache off -> on and the pool doubled after the first variant's requests: that variant
    fails as server_changed (during it), the next one too (before it) — never a PASS of ON
    against an "OFF" that is no longer off."""
    off, _ = servers
    handler = type("H", (ChangingProxy,), {"upstream": off.url, "generated": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        path = write_scenario(tmp_path, external_text(url, url, quality=False))
        r = run_harness("run", path, "--results-dir", tmp_path / "results", "--no-report")
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode != ExitCode.OK, r.stdout + r.stderr
    run = only_run(tmp_path / "results")
    first, second = (results.read_json(run / name / "status.json") for name in ("off", "on"))
    assert (first["state"], first["cause"]) == ("failed", "server_changed"), first
    assert first["cause_detail"]["when"] == "during the variant"
    assert "enable_hierarchical_cache: False -> True" in first["cause_detail"]["changes"]
    assert "max_total_num_tokens: 8192 -> 16384" in first["cause_detail"]["changes"]
    assert (second["state"], second["cause"]) == ("failed", "server_changed"), second
    assert second["cause_detail"]["when"] == "before the variant"
    assert "the attached server changed" in r.stderr
    assert list(results.read_jsonl(run / "off" / "requests.jsonl")), "what it measured is kept"
