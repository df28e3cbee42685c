"""The report's quality section: per-variant parity groups and the worst ON-vs-OFF samples.

One job: shaping the stored parity results (summary.json's ``quality.parity``, parity.json,
quality.jsonl) for display; the scoring itself is `harness.quality.parity`'s.
"""

from __future__ import annotations

from typing import Any

from harness.report.view import RunView, baseline_variant

_SEVERITY = {"divergence": 0, "tie_flip": 1, "equal": 2}


def parity_groups(view: RunView) -> list[dict]:
    """Per variant with a parity summary: verdict, reason, host-hit counts and its task groups."""
    out = []
    for n in view.names:
        p = (view.summary(n).get("quality") or {}).get("parity")
        if not p:
            continue
        out.append({"variant": n, "verdict": p.get("verdict"), "reason": p.get("reason"),
                    "baseline_noise": p.get("baseline_noise"), "host_hit_requests": p.get("host_hit_requests"),
                    "on_requests": p.get("on_requests"), "groups": p.get("groups") or []})
    return out


def _window(ids: list | None, d: int, k: int = 20) -> dict[str, Any]:
    ids = list(ids or [])
    lo = max(0, d - k)
    return {"before": ids[lo:d], "at": ids[d] if d < len(ids) else None, "after": ids[d + 1:d + 1 + k], "start": lo}


def _top(rec: dict | None, d: int) -> list[tuple[Any, str]]:
    top = (rec or {}).get("top_logprobs") or []
    if d >= len(top) or not top[d]:
        return []
    pairs = sorted(((p[0], float(p[1])) for p in top[d]), key=lambda x: -x[1])[:5]
    return [(tok, f"{lp:.3f}") for tok, lp in pairs]


def worst_samples(view: RunView, limit: int = 4) -> list[dict]:
    """Per HiCache variant, the worst ON-vs-OFF pairs (real divergences first, earliest first):
    ±20 tokens of both outputs around the first divergence and the top-5 at it."""
    base = baseline_variant(view)
    out: list[dict] = []
    for n in view.names:
        if n == base:
            continue
        parity = view.parity(n)
        if parity is None:
            continue
        diffs = [c for c in parity.get("comparisons") or [] if c.get("kind") != "equal"]
        if not diffs:
            continue
        diffs.sort(key=lambda c: (_SEVERITY.get(c.get("kind"), 3), bool(c.get("noise")), c.get("first_divergence") or 0))
        on_rows = view.quality_rows(n)
        off_rows = view.quality_rows(base) if base else []
        key = lambda r: (r.get("task"), r.get("length_target"), r.get("index"), r.get("seed"), r.get("ask"))
        on_by = {key(r): r for r in on_rows if r.get("arm_role", "on") == "on"}
        off_by = {key(r): r for r in off_rows if r.get("arm_role") == "off"}
        for c in diffs[:limit]:
            on, off = on_by.get(key(c)), off_by.get(key(c))
            d = int(c.get("first_divergence") or 0)
            out.append({
                "variant": n, "task": c.get("task"), "length": c.get("length_target"), "index": c.get("index"),
                "ask": c.get("ask"), "kind": c.get("kind"), "noise": c.get("noise"), "divergence": d,
                "ref_token": c.get("ref_token"), "cand_token": c.get("cand_token"),
                "max_abs_dlogprob": c.get("max_abs_dlogprob"), "cached_host": c.get("cand_cached_host"),
                "off_ids": _window((off or {}).get("output_ids"), d), "on_ids": _window((on or {}).get("output_ids"), d),
                "off_text": (off or {}).get("text"), "on_text": (on or {}).get("text"),
                "off_top": _top(off, d), "on_top": _top(on, d),
            })
    return out
