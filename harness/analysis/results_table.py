"""The results table printed at the end of ``harness run`` and by ``harness show RUN``.

One row per variant, the figures a HiCache engineer asks first, read from the stored run folder
and never recomputed: each variant's ``summary.json`` (its workloads' phase statistics and derived
figures, its parity verdict), ``verdict.json`` (the variant's outcome) and, where ``harness
compare`` wrote one, ``comparison.json`` (the change of each figure against the baseline and the
comparison's state). Columns:

- the columns a workload kind declares it fills (``WorkloadKind.table_cells``), each from the
  first workload in scenario order that has the figure: ``cold TTFT`` (TTFT p50 of a cold phase,
  ms), ``device hit`` / ``host hit`` (TTFT p50 of the phases that repeat a prompt from the device
  and, after eviction, from the host, ms), ``2nd pass`` (the parallel prefixes' second-pass
  speedup: pass 1 wall / pass 2 wall, ×), ``decode rate`` (tok/s);
- ``host %`` / ``storage %``: the share of prompt tokens served from the host tier / the storage
  tier over every measured phase of every workload (eviction fillers left out): the sums of the
  phases' ``hits.host_tokens`` (``storage_tokens``) over their ``hits.prompt_tokens``;
- ``knee`` / ``goodput``: the first swept workload's ``knee_rate`` (or ``knee_concurrency``) and
  ``goodput_rps`` (its best load point), where a sweep with an SLO ran;
- ``energy``: joules per token over every workload (summary ``energy.total.j_per_token``,
  `harness.analysis.energy`; a note says when it is the simulator's);
- ``cost``: $ per million tokens at the SLO's goodput (``cost.json``, with a scenario's ``cost:``
  prices, `harness.analysis.cost`), and under the table the cheapest variant that met the SLO;
- ``parity``: the variant's quality parity verdict.

A figure that has a comparison row shows its change against the baseline after it, e.g.
``88.5 (+4.1% regression)``. ``to_json`` is the same table for scripts (``--json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.store import run_folder
from harness.store.products import read_comparison, read_cost, read_verdict
from harness.store.summary import Summary, WorkloadSummary


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    unit: str
    digits: int  # significant digits shown on the console


COLUMNS = (
    Column("cold_ttft_ms", "cold TTFT", "ms", 3),
    Column("device_hit_ttft_ms", "device hit", "ms", 3),
    Column("host_hit_ttft_ms", "host hit", "ms", 3),
    Column("second_pass_speedup", "2nd pass", "×", 3),
    Column("host_share", "host %", "%", 3),
    Column("storage_share", "storage %", "%", 3),
    Column("decode_tok_s", "decode rate", "tok/s", 3),
    Column("knee", "knee", "", 3),
    Column("goodput_rps", "goodput", "req/s", 3),
    Column("j_per_token", "energy", "J/tok", 3),
    Column("usd_per_mtok", "cost", "$/Mtok", 3),
)


@dataclass
class Cell:
    value: float | None
    source: str | None = None  # workload.phase.metric (or workload.metric) the value was read from
    change: float | None = None  # relative change against the baseline (comparison.json)
    state: str | None = None  # the comparison row's state
    unit: str | None = None  # a cell whose unit is its own (the knee: req/s or requests)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "change": self.change, "state": self.state}


@dataclass
class Row:
    variant: str
    state: str  # status.json's state
    outcome: str | None  # verdict.json's outcome for the variant
    cells: dict[str, Cell]
    parity: str | None
    parity_state: str | None = None  # the comparison's parity row state

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "state": self.state,
            "outcome": self.outcome,
            **{k: c.to_dict() for k, c in self.cells.items()},
            "parity": self.parity,
        }


@dataclass
class ResultsTable:
    run_dir: Path
    rows: list[Row]
    verdict: str | None
    baseline: str | None = None  # the compared baseline run's folder, where comparison.json exists
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": str(self.run_dir),
            "verdict": self.verdict,
            "baseline": self.baseline,
            "columns": {c.key: {"title": c.title, "unit": c.unit} for c in COLUMNS},
            "variants": [r.to_dict() for r in self.rows],
            "notes": self.notes,
        }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _kind_cells(workloads: Mapping[str, WorkloadSummary], kinds: dict[str, str]) -> dict[str, Cell]:
    """The columns the kinds declare (``WorkloadKind.table_cells``), each from the first workload
    in scenario order that has a figure for it."""
    from harness.workloads import kind_of
    from harness.workloads.kind import PhaseStat

    out: dict[str, Cell] = {}
    for name, wl in workloads.items():
        kind = kind_of(name, kinds)
        if kind is None:
            continue
        for column, spec in kind.table_cells.items():
            if column in out:
                continue
            if isinstance(spec, PhaseStat):
                value = _num(spec.stored(wl.phases))
                source = f"{name}.{spec.phase}.{spec.metric}"
            else:
                value = _num(wl.derived.get(spec))
                source = f"{name}.{spec}"
            if value is not None:
                out[column] = Cell(value, source)
    return out


def _derived(workloads: Mapping[str, WorkloadSummary], metric: str) -> Cell:
    """A derived figure of the first workload that has it (the sweeps' knee and goodput)."""
    for name, wl in workloads.items():
        value = _num(wl.derived.get(metric))
        if value is not None:
            return Cell(value, f"{name}.{metric}")
    return Cell(None)


def _shares(workloads: Mapping[str, WorkloadSummary]) -> tuple[Cell, Cell]:
    prompt = host = storage = 0
    for wl in workloads.values():
        for ph in wl.phases.values():
            if ph.filler:
                continue
            prompt += ph.hits.get("prompt_tokens") or 0
            host += ph.hits.get("host_tokens") or 0
            storage += ph.hits.get("storage_tokens") or 0
    if not prompt:
        return Cell(None), Cell(None)
    return Cell(100.0 * host / prompt, "hits.host_tokens"), Cell(100.0 * storage / prompt, "hits.storage_tokens")


def _cells(summary: Summary | None, kinds: dict[str, str]) -> dict[str, Cell]:
    wls = (summary.workloads if summary is not None else None) or {}
    declared = _kind_cells(wls, kinds)
    host, storage = _shares(wls)
    knee = _derived(wls, "knee_rate")
    knee.unit = "req/s"
    if knee.value is None:
        knee = _derived(wls, "knee_concurrency")
        knee.unit = "in flight"
    total = (summary.energy.get("total") if summary is not None else None) or {}
    energy = Cell(_num(total.get("j_per_token")), "energy.total.j_per_token")
    measured = {
        "host_share": host,
        "storage_share": storage,
        "knee": knee,
        "goodput_rps": _derived(wls, "goodput_rps"),
        "j_per_token": energy,
    }
    return {c.key: declared.get(c.key) or measured.get(c.key) or Cell(None) for c in COLUMNS}


def _compared_row(compared: dict[tuple[str, str], Mapping], variant: str, source: str | None) -> Mapping | None:
    """The comparison row of a cell: its own name, else (a derived median such as
    ``decode.decode_tok_s``) the one row of the same workload and metric."""
    if source is None:
        return None
    if (variant, source) in compared:
        return compared[(variant, source)]
    wl, _, metric = source.rpartition(".")
    rows = [
        m
        for (v, name), m in compared.items()
        if v == variant and name.startswith(wl + ".") and name.endswith("." + metric)
    ]
    return rows[0] if len(rows) == 1 else None


def results_table(run_dir: Path) -> ResultsTable:
    """The table of the run folder ``run_dir`` (`results.ResultsError` for a damaged file)."""
    run = run_folder.load_run(Path(run_dir))
    from harness.workloads import workload_kinds

    kinds = workload_kinds(run.manifest.scenario.data.get("workloads"))
    verdict = read_verdict(run.paths.root)
    outcomes = verdict.variants if verdict is not None else {}
    comparison = read_comparison(run.paths.root)
    compared: dict[tuple[str, str], Mapping] = {}
    for m in comparison.metrics if comparison is not None else ():
        name = f"{m.get('workload')}.{m.get('metric')}" if m.get("phase") == "*" else None
        name = name or f"{m.get('workload')}.{m.get('phase')}.{m.get('metric')}"
        compared[(m.get("variant"), name)] = m
    cost = read_cost(run.paths.root)
    priced = cost.variants if cost is not None else {}
    rows = []
    simulated_energy = False
    for v in run.variants:
        cells = _cells(v.summary, kinds)
        simulated_energy |= v.summary is not None and v.summary.energy.get("source") == "simulated"
        c = priced.get(v.name)
        cells["usd_per_mtok"] = Cell(_num(c.usd_per_mtok if c is not None else None), "cost.usd_per_mtok")
        for cell in cells.values():
            row = _compared_row(compared, v.name, cell.source)
            if row is not None:
                cell.change, cell.state = _num(row.get("change")), row.get("state")
        parity = v.summary.parity if v.summary is not None else {}
        prow = compared.get((v.name, "quality.parity"))
        rows.append(
            Row(
                v.name,
                str(v.status.state),
                outcomes.get(v.name),
                cells,
                parity.get("verdict"),
                prow.get("state") if prow else None,
            )
        )
    notes = []
    if cost is not None and cost.text:
        notes.append(str(cost.text))
    if simulated_energy:
        notes.append("energy: SIMULATED (the simulator's pretend GPU, not a measurement)")
    if comparison is None:
        notes.append(f"no baseline compared: harness compare {run.paths.root} --baseline latest")
    baseline = comparison.baseline_path if comparison is not None and comparison.raw else None
    return ResultsTable(run.paths.root, rows, verdict.outcome if verdict is not None else None, baseline, notes)


def _fmt(v: float, digits: int) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 10 ** (digits - 1):
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


# How a comparison row's state reads after its change: "?" is a change no test could judge (one
# repeat, too few samples): more repeats or a gate would (the legend under the table says so).
_STATE_MARK = {"regression": " REGRESSION", "improved": " improved", "inconclusive": "?", "unchanged": ""}


def _mark(state: str | None) -> str:
    return "" if state is None else _STATE_MARK.get(state, f" {state}")


def _cell_text(col: Column, c: Cell) -> str:
    if c.value is None:
        return "-"
    text = _fmt(c.value, col.digits)
    if col.key == "knee" and c.unit:
        text += f" {c.unit}"
    if c.change is not None:
        text += f" ({c.change * 100:+.1f}%{_mark(c.state)})"
    elif c.state is not None and _mark(c.state):
        text += f" ({_mark(c.state).strip()})"
    return text


def to_text(table: ResultsTable) -> str:
    """The table as aligned plain text: a header line with units, one line per variant; columns
    no variant has a figure for are left out (a smoke run has no knee)."""
    cols = [c for c in COLUMNS if any(r.cells[c.key].value is not None for r in table.rows)]
    header = ["variant", "outcome", *(f"{c.title}{f' {c.unit}' if c.unit and c.unit != '%' else ''}" for c in cols)]
    header.append("parity")
    lines = [header]
    for r in table.rows:
        parity = r.parity or "-"
        if r.parity_state not in (None, "compared"):
            parity += f" ({r.parity_state})"
        lines.append([r.variant, r.outcome or r.state, *(_cell_text(c, r.cells[c.key]) for c in cols), parity])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [
        "  ".join(s.ljust(w) if i < 2 else s.rjust(w) for i, (s, w) in enumerate(zip(line, widths))).rstrip()
        for line in lines
    ]
    title = f"results ({table.run_dir})"
    if table.baseline:
        title += f", change against baseline {table.baseline}"
    notes = list(table.notes)
    if any(c.state == "inconclusive" for r in table.rows for c in r.cells.values()):
        notes.append(
            "?: a change no test could judge at this sample size; more repeats (--repeats N) or a gate "
            "(expectations.thresholds) would"
        )
    return "\n".join([title, *out, *(f"  {n}" for n in notes)]) + "\n"
