"""The report's header section: the verdict banner, run identity, host fingerprint, platform
probes, the variants.

One job: shaping the manifest's and statuses' fields for the top of the page. The banner's
verdict judges the run as a whole from stored states: declared expectations met or not, the
within-run expectation results, a regression in comparison.json.
"""

from __future__ import annotations

from typing import Any

from harness.report.formatting import KIB_PER_GIB, failure_text
from harness.report.view import RunView


def probe_rows(probe: dict | None) -> list[tuple[str, str]]:
    """The stored platform-probe result as (label, value) rows; none without a probe."""
    if not probe:
        return []
    rows = [("WSL", str(probe.get("wsl"))), ("torch / CUDA", f"{probe.get('torch_version')} / {probe.get('cuda_runtime')}"),
            ("driver", str(probe.get("nvidia_driver") or probe.get("driver_version")))]
    for d in probe.get("devices") or []:
        rows.append((f"GPU{d.get('index')} {d.get('name')}",
                     (f"pageableMemoryAccess={d.get('pageable_memory_access')}, "
                      f"usesHostPageTables={d.get('pageable_memory_access_uses_host_page_tables')}, "
                      f"HMM/ATS: {d.get('hmm_or_ats')}")))
    reg = probe.get("host_register_kernel_write") or {}
    if reg:
        rows.append(("kernel write to cudaHostRegister memory",
                     ", ".join(f"flags {k}: {'ok' if (v or {}).get('ok') else 'FAIL'}" for k, v in reg.items())))
    ha = probe.get("host_alloc_kernel_write")
    if ha:
        rows.append(("kernel write to cudaHostAlloc memory", "ok" if ha.get("ok") else "FAIL"))
    bw = probe.get("bandwidth_gbs") or {}
    if bw:
        rows.append(("bandwidth GB/s", ", ".join(f"{k} {v:.1f}" for k, v in bw.items() if v is not None)))
    if probe.get("reason"):
        rows.append(("note", str(probe.get("reason"))))
    return rows


def header(view: RunView) -> dict[str, Any]:
    """Scenario, run id, backend, versions, harness argv, host rows and the allowlisted env."""
    m = view.manifest
    sg = m.get("sglang") or {}
    src = m.get("sglang_source") or {}
    host = m.get("host") or {}
    mem_total = host.get("mem_total_kib")
    gpus = ", ".join(f"{g.get('name')} ({g.get('memory_total_mib')} MiB, driver {g.get('driver')})"
                     for g in host.get("gpus") or []) or "none recorded"
    return {
        "scenario": (m.get("scenario") or {}).get("name"), "scenario_path": (m.get("scenario") or {}).get("path"),
        "scenario_hash": (m.get("scenario") or {}).get("hash"), "description": view.description,
        "run_id": view.root.name, "created_at": m.get("created_at"), "backend": m.get("backend"),
        "simulated": bool(m.get("simulated")), "harness_version": m.get("harness_version"),
        "harness_argv": " ".join(m.get("harness_argv") or []), "seed": m.get("seed"), "repeats": m.get("repeats"),
        "sglang_version": sg.get("version"), "sglang_location": sg.get("location"),
        "sglang_git": sg.get("git") or src or None,
        "host": [("host", host.get("hostname")), ("kernel", host.get("kernel")), ("WSL", host.get("wsl")),
                 ("CPU", f"{host.get('cpu')} × {host.get('cpu_count')}"),
                 ("MemTotal", f"{mem_total / KIB_PER_GIB:.1f} GiB" if mem_total else "not recorded"), ("GPUs", gpus),
                 ("python", host.get("python"))],
        "env": m.get("env") or {},
    }


def variant_rows(view: RunView) -> list[dict]:
    """One row per manifest variant: state, expectation, HiCache block, argv/env, config hash."""
    out = []
    for e in view.manifest.get("variants", []):
        st = view.status(e["name"]) if e["name"] in view.names else {}
        out.append({"name": e["name"], "state": st.get("state"), "cause": st.get("cause"),
                    "expect": e.get("expect"), "expect_met": st.get("expect_met"),
                    "hicache": e.get("hicache"), "argv": " ".join(e.get("argv") or []),
                    "env": e.get("env") or {}, "config_hash": (e.get("config_hash") or "")[:12],
                    "ready_s": st.get("ready_s"), "env_not_clean": st.get("env_not_clean")})
    return out


def banner_verdict(view: RunView, expectations: list[dict]) -> tuple[str, list[str]]:
    """(PASS | FAIL | INCOMPLETE | INTERRUPTED, reasons) of the run as a whole."""
    reasons = []
    if not view.complete:
        return ("INTERRUPTED" if view.interrupted else "INCOMPLETE"), ["the run did not finish"]
    for v in view.variants:
        if v.status.get("expect_met") is False:
            exp = v.status.get("expect")
            cause = v.status.get("expect_cause")
            reasons.append(f"{v.name}: {failure_text(v.status)} (expected {exp}{': ' + cause if cause else ''})")
    for e in expectations:
        if e.get("failed"):
            reasons.append(f"expectation {e['check']} on {e['variant']}: {e['outcome']}")
    if view.comparison and view.comparison.get("verdict") == "regression":
        reasons.append("regression against the baseline run (see Comparison)")
    return ("FAIL" if reasons else "PASS"), reasons
