"""The report and compare learn the load shapes: latency vs offered and achieved load (p50, p90,
p95, p99), goodput and the knee as the headline, per-round TTFT and tokens by tier, schedule-lag
warnings; compare's curve points pairwise (and not where the grids differ), the knee and goodput
in Markdown and JUnit.

Runs are built from real records (`tests.factories.write_run`) summarized with their workload
configs as the runner does, so every number below is known: open_loop ``ol`` sweeps 1, 2, 4 req/s
with a TTFT SLO of 200 ms at p90 — OFF's TTFT is 100 / 150 / 400 ms (the SLO breaks at 4: knee
2), ON's 100 / 150 / 180 ms (knee 4); ``chat`` (multi_turn_clients) has three rounds whose third
comes from the host tier on ON and is recomputed on OFF."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from harness.analysis.run_products import write_summary_csv
from harness.analysis.summary import summarize
from harness.compare import compare_runs, to_junit, to_markdown
from harness.report import plots as P
from harness.report.curves import lag_warnings, load_curves, round_series
from harness.report.html import write_report
from harness.report.view import load_view
from harness.scenario import load_scenario_text
from harness.store import results, run_folder
from tests.conftest import only_run, run_harness, sim_scenario, write_scenario
from tests.factories import MS, make_record, write_run
from tests.sim_workloads import workload

RATES = (1, 2, 4)
TTFT = {"off": (100.0, 150.0, 400.0), "on": (100.0, 150.0, 180.0)}
N = 10  # requests per point

SCENARIO = """name: synth
server: {backend: sim, model_path: models/llama-tiny}
variants:
  - name: "off"
  - name: "on"
    hicache: {ratio: 2}
workloads:
  - {name: ol, kind: open_loop, rate: [RATES], duration_s: 3, prompt_tokens: 1000, output_tokens: 3, slo: {ttft_ms: 200}}
  - {name: chat, kind: multi_turn_clients, clients: 2, rounds: 3}
gate: [ol.knee_rate, ol.goodput_rps]
"""


def _text(rates=RATES) -> str:
    return SCENARIO.replace("RATES", ", ".join(str(r) for r in rates))


def _configs(rates=RATES, lag_limit_ms: float = 1.0) -> dict:
    ol = workload(
        name="ol",
        kind="open_loop",
        rate=list(rates),
        duration_s=3,
        prompt_tokens=1000,
        output_tokens=3,
        slo={"ttft_ms": 200},
        lag_limit_ms=lag_limit_ms,
    )
    return {"ol": ol, "chat": workload(name="chat", kind="multi_turn_clients", clients=2, rounds=3)}


def _records(variant: str, *, lag_ms: float = 0.01, lagged_phase: str | None = None, rates=RATES, scale=1.0):
    out = []
    for rate, ttft in zip(rates, TTFT[variant] if rates == RATES else [100.0 * (k + 1) for k in range(len(rates))]):
        phase = f"rate_{rate}"
        for i in range(N):
            sched = (1000 + i * 1000 // rate) * MS
            lag = lag_ms if phase != lagged_phase else 3.0
            r = make_record(
                variant=variant,
                workload="ol",
                phase=phase,
                index=i,
                sent_ns=sched + int(lag * MS),
                ttft_ms=ttft * scale * (1 + 0.01 * i),
                output_tokens=3,
                itl_ms=10,
            )
            r.scheduled_ns = sched
            out.append(r)
    for k in (1, 2, 3):
        for c in range(2):
            prompt = 1000 * k
            if k == 1:
                tiers = dict(cached_tokens=0, cached_device=0, cached_host=0)
            elif k == 2 or variant == "off":
                cached = prompt - 1000 if k == 2 else 0
                tiers = dict(cached_tokens=cached, cached_device=cached, cached_host=0)
            else:  # ON's third round comes back from the host tier
                tiers = dict(cached_tokens=prompt - 1000, cached_device=0, cached_host=prompt - 1000)
            r = make_record(
                variant=variant,
                workload="chat",
                phase=f"round{k}",
                index=c,
                sent_ns=(50_000 + k * 1000) * MS,
                ttft_ms=40.0 * k if variant == "off" else 40.0,
                prompt_tokens=prompt,
                output_tokens=2,
                **tiers,
            )
            r.scheduled_ns = r.sent_ns
            out.append(r)
    return out


def _run(tmp_path, run_id="20261201T000000Z-aaaaaa", rates=RATES, lag_limit_ms=1.0, **kw):
    recs = {v: _records(v, rates=rates, **kw.get(v, {})) for v in ("off", "on")}
    names = {"ol": "open_loop", "chat": "multi_turn_clients"}
    summaries = {v: summarize(r, names, _configs(rates, lag_limit_ms)) for v, r in recs.items()}
    return write_run(tmp_path / "results", run_id, recs, text=_text(rates), summaries=summaries)


def _section(html: str, ident: str) -> str:
    m = re.search(rf'id="{ident}".*?(</table>|</div>)', html, re.S)
    assert m, ident
    return m.group(0)


def _png(html: str, alt: str) -> bytes:
    m = re.search(rf'alt="{re.escape(alt)}" src="data:image/png;base64,([^"]+)"', html)
    assert m, alt
    data = base64.b64decode(m.group(1))
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    return data


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A run without schedule lag and its report (written once: a report draws for seconds)."""
    tmp = tmp_path_factory.mktemp("clean")
    run = _run(tmp)
    return run, write_report(run, tmp / "reports").read_text()


@pytest.fixture(scope="module")
def lagged(tmp_path_factory):
    """A run whose OFF variant sent rate_2 3 ms late, and its report."""
    tmp = tmp_path_factory.mktemp("lagged")
    run = _run(tmp, off={"lagged_phase": "rate_2"})
    return run, write_report(run, tmp / "reports").read_text()


# --------------------------------------------------------------------------------- the report


def test_the_knee_is_where_the_slo_breaks_and_heads_the_report(clean):
    run, html = clean
    view = load_view(run)
    (ol,) = load_curves(view)
    assert ol.axis == "rate" and ol.slo == {"ttft_ms": 200.0} and ol.slo_percentile == 90
    assert ol.knee == {"off": 2.0, "on": 4.0}  # OFF's p90 at 4 req/s is ~430 ms > 200
    off = ol.points["off"]
    assert [p.value for p in off] == [1.0, 2.0, 4.0] and [p.slo_percentile_met for p in off] == [True, True, False]
    assert off[2].goodput_rps == 0 and off[1].goodput_rps == pytest.approx(N / 3)  # 10 good over 3 s
    head = _section(html, "headline")
    rows = re.findall(r'<td class="label">ol</td><td class="label">(\w+)</td>.*?<td class="knee">([^<]*)<', head)
    assert rows == [("off", "2 req/s"), ("on", "4 req/s")]
    assert "TTFT ≤ 200 ms at p90" in head
    _png(html, "goodput of ol")
    _png(html, "latency vs load of ol")


def test_percentile_tables_have_p95_with_the_right_values(clean):
    run, html = clean
    table = _section(html, "curve-ol")
    assert table.count("<th>p95</th>") == 3  # TTFT, ITL, TPOT
    assert re.findall(r"<th>(p\d\d)</th>", table)[:4] == ["p50", "p90", "p95", "p99"]
    ttft = np.array([400.0 * (1 + 0.01 * i) for i in range(N)])
    row = re.search(r'<td class="label">off</td><td class="label">rate_4</td>(.*?)</tr>', table, re.S).group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)<", row)
    # offered, achieved, n, then TTFT p50 p90 p95 p99
    assert cells[0] == "4" and cells[2] == str(N)
    assert cells[3:7] == [f"{np.percentile(ttft, q):.0f}" for q in (50, 90, 95, 99)]
    write_summary_csv(results.RunPaths(run), ["off", "on"])
    header = (run / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[header.index("p90") : header.index("p99") + 1] == ["p90", "p95", "p99"]


def test_rounds_show_where_conversations_fall_into_the_host_tier(clean):
    run, html = clean
    (chat,) = round_series(load_view(run))
    assert chat.rounds == [1, 2, 3]
    assert chat.tiers["on"]["host"] == [0, 0, 4000] and chat.tiers["off"]["host"] == [0, 0, 0]
    assert chat.tiers["off"]["computed"] == [2000, 2000, 6000]
    assert chat.ttft["off"]["p50"] == [40.0, 80.0, 120.0] and chat.first_host_round == {"off": None, "on": 3.0}
    table = _section(html, "rounds-chat")
    assert "<th>TTFT p95 ms</th>" in table and "<th>host tokens</th>" in table
    row = re.search(r"<tr><td>3</td><td class=\"label\">on</td>(.*?)</tr>", table).group(1)
    assert re.findall(r"<td>([^<]*)</td>", row)[-1] == "67%"  # 4000 of 6000 prompt tokens
    _png(html, "rounds of chat")


def test_the_lag_warning_appears_when_a_lag_is_forced_and_not_otherwise(clean, lagged, tmp_path):
    run, html = clean
    assert not lag_warnings(load_view(run))
    assert 'id="lag-warnings"' not in html and "variant-lag" not in html and "schedule lag of" not in html
    run, html = lagged
    (w,) = lag_warnings(load_view(run))
    assert (w.variant, w.workload, w.phase, w.client_bound) == ("off", "ol", "rate_2", True)
    assert w.lag_p99_ms == pytest.approx(3.0)
    top = _section(html, "lag-warnings")
    assert "off: ol sent late — rate_2 (lag p99 3 ms, flagged client-bound)" in top and "on:" not in top
    assert html.index('id="lag-warnings"') < html.index('id="hicache"')  # at the top of the page
    assert html.count("variant-lag") == 1  # in the off variant's section only
    _png(html, "schedule lag of off")
    # a p99 lag over 1 ms that the workload did not flag (its own lag_limit_ms is 5) still warns
    loose = _run(tmp_path / "d", lag_limit_ms=5.0, off={"lag_ms": 2.0})
    flags = {(x.variant, x.workload, x.phase, x.client_bound) for x in lag_warnings(load_view(loose))}
    assert flags == {("off", "ol", f"rate_{r}", False) for r in RATES}
    assert not lag_warnings(load_view(_run(tmp_path / "e", lag_limit_ms=5.0, off={"lag_ms": 0.9})))


def test_decimate_keeps_the_ends_and_at_most_max_points():
    x, y = P.decimate(range(10_000), [float(i) for i in range(10_000)], 400)
    assert len(x) <= 400 and x[0] == 0 and x[-1] == 9999 and np.array_equal(x, y)
    x, y = P.decimate([1, 2, 3], [1.0, None, 3.0])
    assert len(x) == 3 and np.isnan(y[1])


# ---------------------------------------------------------------------------------- compare


def test_compare_pairs_curve_points_and_shows_the_knee(tmp_path):
    base = _run(tmp_path, "20261201T000000Z-aaaaaa")
    cand = _run(tmp_path, "20261201T010000Z-bbbbbb", on={"scale": 1.5})  # ON 50 % slower everywhere
    comp = compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    points = {(c.variant, c.phase): c for c in comp.curves}
    assert set(points) == {(v, f"rate_{r}") for v in ("off", "on") for r in RATES}
    on4 = points[("on", "rate_4")]
    assert on4.state == "regression" and on4.baseline["ttft_ms"]["p95"] < on4.candidate["ttft_ms"]["p95"]
    assert points[("off", "rate_4")].state == "unchanged"
    knees = {m.variant: m for m in comp.metrics if m.name == "ol.knee_rate"}
    assert knees["on"].gating and knees["on"].baseline_p50 == 4.0 and knees["on"].candidate_p50 == 1.0
    md = to_markdown(comp)
    assert "**Knee and goodput**" in md and "| on | ol.knee_rate | yes | 4 req/s | 1 req/s |" in md
    assert "**Latency vs load**" in md and "p50 / p90 / p95 / p99" in md
    line = next(x for x in md.splitlines() if x.startswith("| on | ol | rate_4 |"))
    assert "regression" in line
    suites = {s.get("name"): s for s in ET.fromstring(to_junit(comp).split("\n", 1)[1])}
    cases = {c.get("classname") + ":" + c.get("name"): c for c in suites["curves"].findall("testcase")}
    assert len(cases) == 6 and cases["curves.on:ol/rate_4"].find("skipped") is not None  # a regression, not gated
    assert "ttft" not in "".join(comp.gate)  # the gate names the knee and goodput
    # the report of the candidate lists the points next to the baseline's
    results.write_json_atomic(cand / "comparison.json", comp.to_dict())
    html = write_report(cand, tmp_path / "reports").read_text()
    table = html[html.index('id="comparison-curves"') :].split("</table>", 1)[0]
    row = next(r for r in table.split("<tr>") if "ol/rate_4" in r and ">on<" in r)
    assert 'class="fail"' in row and ">regression<" in row
    assert table.count("<tr>") == 1 + 6  # the header and one row per variant and rate


def test_curve_points_are_not_compared_when_the_grids_differ(tmp_path):
    base = _run(tmp_path, "20261201T000000Z-aaaaaa")
    cand = _run(tmp_path, "20261201T010000Z-bbbbbb", rates=(1, 2, 8))
    comp = compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    assert comp.curves and all(c.state == "not_comparable" for c in comp.curves)
    assert (
        "rate grids differ: baseline [rate_1, rate_2, rate_4], candidate [rate_1, rate_2, rate_8]"
        in comp.curves[0].note
    )
    rows = [m for m in comp.metrics if m.workload == "ol" and m.phase != "*"]
    assert rows and all(m.state == "not_comparable" for m in rows)  # rate_1 against rate_1 included


def _knee_row(comp, variant="on", figure="ol.knee_rate"):
    return next(m for m in comp.metrics if m.variant == variant and m.name == figure)


def test_a_vanished_knee_is_the_worst_regression_and_fails_the_gate(tmp_path):
    """ON's candidate misses the 200 ms SLO even at 1 req/s (TTFT 300 ms): its knee is below the
    lowest rate tried, against the baseline's 4 — a regression, said alike in JSON, Markdown,
    JUnit and the report."""
    base = _run(tmp_path, "20261201T000000Z-aaaaaa")
    cand = _run(tmp_path, "20261201T010000Z-bbbbbb", on={"scale": 3.0})
    comp = compare_runs(run_folder.load_run(base), run_folder.load_run(cand))
    knee = _knee_row(comp)
    assert (knee.state, knee.candidate_below, knee.candidate_p50, knee.baseline_p50) == ("regression", 1.0, None, 4.0)
    assert knee.gating and knee.n_candidate == 1 and "lowest rate tried (1) missed the SLO at p90" in knee.note
    assert _knee_row(comp, "off").state != "regression"  # OFF unchanged: knee 2 in both
    assert comp.outcome == "FAIL" and any(r.startswith("on ol.knee_rate: regression") for r in comp.reasons)
    assert comp.to_dict()["metrics"][comp.metrics.index(knee)]["candidate_below"] == 1.0
    md = to_markdown(comp)
    line = next(x for x in md.splitlines() if x.startswith("| on | ol.knee_rate | yes | 4 req/s | &lt; 1 req/s |"))
    assert "knee vanished" in line and "**regression**" in line
    suites = {s.get("name"): s for s in ET.fromstring(to_junit(comp).split("\n", 1)[1])}
    case = next(
        c
        for c in suites["metrics"].findall("testcase")
        if c.get("name") == "ol/*/knee_rate" and "on" in c.get("classname")
    )
    failure = case.find("failure")
    assert (
        failure is not None and "-> < 1 req/s" in failure.get("message") and "knee vanished" in failure.get("message")
    )
    results.write_json_atomic(cand / "comparison.json", comp.to_dict())
    html = write_report(cand, tmp_path / "reports").read_text()
    row = next(r for r in html.split("<tr>") if '<td class="label">knee_rate</td>' in r and ">on<" in r)
    assert "<td>4</td><td>&lt; 1</td>" in row and 'class="fail"' in row and ">regression<" in row


def test_a_knee_that_appears_is_an_improvement_and_none_in_either_run_is_inconclusive(tmp_path):
    slow = _run(tmp_path, "20261201T000000Z-aaaaaa", on={"scale": 3.0})
    fast = _run(tmp_path, "20261201T010000Z-bbbbbb")
    comp = compare_runs(run_folder.load_run(slow), run_folder.load_run(fast))
    knee = _knee_row(comp)
    assert (knee.state, knee.baseline_below, knee.baseline_p50, knee.candidate_p50) == ("improved", 1.0, None, 4.0)
    assert "| on | ol.knee_rate | yes | &lt; 1 req/s | 4 req/s |" in to_markdown(comp)
    both = compare_runs(
        run_folder.load_run(slow), run_folder.load_run(_run(tmp_path, "20261201T020000Z-cccccc", on={"scale": 3.0}))
    )
    knee = _knee_row(both)
    assert knee.state == "inconclusive" and knee.baseline_below == knee.candidate_below == 1.0
    assert "no knee in either run" in knee.note and both.outcome == "INCONCLUSIVE"


def test_a_vanished_knee_on_another_grid_stays_not_comparable(tmp_path):
    base = _run(tmp_path, "20261201T000000Z-aaaaaa")
    cand = _run(tmp_path, "20261201T010000Z-bbbbbb", rates=(1, 2, 8), on={"scale": 3.0})
    knee = _knee_row(compare_runs(run_folder.load_run(base), run_folder.load_run(cand)))
    assert knee.state == "not_comparable" and knee.candidate_below is None


def test_the_knee_and_goodput_pass_validates_gate_check():
    s = load_scenario_text(_sglang(_text()), "g.yaml", env={})
    assert [g.metric for g in s.gate] == ["ol.knee_rate", "ol.goodput_rps"]
    conc = (
        _text()
        .replace("rate: [1, 2, 4]", "max_concurrency: [1, 2]")
        .replace("gate: [ol.knee_rate, ol.goodput_rps]", "gate: [ol.knee_concurrency, ol.rate_4.ttft_ms]")
    )
    assert [g.metric for g in load_scenario_text(_sglang(conc), "g.yaml", env={}).gate] == [
        "ol.knee_concurrency",
        "ol.rate_4.ttft_ms",
    ]
    with pytest.raises(Exception, match="compares no derived figure 'knee'"):
        load_scenario_text(_sglang(_text().replace("ol.knee_rate", "ol.knee")), "g.yaml", env={})


def _sglang(text: str) -> str:
    """The scenario against a real sglang (nothing read from a model folder at validation)."""
    return text.replace(
        "server: {backend: sim, model_path: models/llama-tiny}", "server: {backend: sglang, model_path: /m}"
    )


def test_achieved_rate_and_goodput_count_each_repeat_once():
    """A phase pools its repeats' requests: the achieved rate is each repeat's sends over its own
    span (the pause between repeats is no load) and goodput is over as many windows as repeats."""
    recs = []
    for rep in (0, 1):
        for i in range(6):
            r = make_record(workload="ol", phase="rate_2", repeat=rep, index=i, sent_ns=(rep * 600_000 + i * 500) * MS)
            r.scheduled_ns = r.sent_ns
            recs.append(r)
    f = summarize(recs, {"ol": "open_loop"}, _configs())["workloads"]["ol"]["phases"]["rate_2"]["figures"]
    assert f["achieved_rps"] == pytest.approx(2.0)  # not 11 sends over ten minutes
    assert f["goodput_rps"] == pytest.approx(12 / (2 * 3.0))  # 12 good requests, two 3 s windows


@pytest.mark.slow
def test_a_simulated_sweep_and_conversations_end_to_end(tmp_path):
    """``harness run`` on the simulator (a rate sweep with an SLO, chat clients whose histories
    outgrow a 4,096-token GPU pool, OFF and ON), then the report: the headline, the curves with
    p95, the rounds with ON's host-tier tokens. Numbers depend on the machine's load: only shapes
    and the knee's consistency with the stored points are asserted."""
    text = sim_scenario(
        """\
        - name: "off"
        - name: "on"
          hicache: {ratio: 2, mem_layout: page_first, write_policy: write_through}
        """,
        """\
        - {kind: open_loop, arrivals: constant, rate: [2, 8], duration_s: 1.0, prompt_tokens: 1000, output_tokens: 2,
           slo: {ttft_ms: 5000}}
        - {kind: multi_turn_clients, clients: 4, rounds: 5, first_turn_tokens: 600, turn_tokens: 150, output_tokens: 8}
        """,
        name="curves_e2e",
        time_scale=0.25,
    )
    scenario = write_scenario(tmp_path, text)
    out = run_harness("run", scenario, "--results-dir", tmp_path / "results", "--reports-dir", tmp_path / "reports")
    assert out.returncode == 0, out.stderr[-3000:]
    run = only_run(tmp_path / "results")
    html = next((tmp_path / "reports").rglob("index.html")).read_text()
    (ol,) = load_curves(load_view(run))
    assert ol.knee == {"off": 8.0, "on": 8.0}  # a 5 s SLO: both points meet it
    assert re.findall(r'<td class="knee">([^<]*)<', _section(html, "headline")) == ["8 req/s", "8 req/s"]
    assert _section(html, "curve-open_loop").count("<th>p95</th>") == 3
    (chat,) = round_series(load_view(run))
    assert chat.rounds == [1, 2, 3, 4, 5] and sum(chat.tiers["off"]["host"]) == 0
    assert sum(chat.tiers["on"]["host"]) > 0  # the later rounds came back from the host tier
    _png(html, "rounds of multi_turn_clients")
