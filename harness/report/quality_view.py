"""The report's quality section: per ON variant, ON-vs-OFF next to the OFF-vs-OFF control, the
test behind the parity verdict, its task groups, and the worst ON-vs-OFF samples.

One job: shaping the stored parity results (summary.json's ``quality.parity`` — the verdict the run
is judged on, with the control's figures and the test under ``floor`` — and parity.json for what the
summary leaves out: each group's reason, and the whole ``floor`` of a summary written before it was
kept) for display; the rule itself is `harness.quality.floor`'s (docs/quality.md).
"""

from __future__ import annotations

from typing import Any

from harness.report.formatting import VERDICT_CSS
from harness.report.view import RunView, baseline_variant
from harness.store.quality_record import ParityFloor

_SEVERITY = {"divergence": 0, "tie_flip": 1, "equal": 2}
# the spreads of floor.on / floor.control, in display order: (key, label)
SPREAD_ROWS = (
    ("pairs", "pairs compared"),
    ("differing", "pairs that differ"),
    ("token_equal", "token-equal"),
    ("tie_flips", "near-tie flips"),
    ("divergences", "divergences"),
    ("outside_topk", "outside top-k"),
    ("first_divergence_median", "first divergence, median"),
    ("first_divergence_min", "first divergence, earliest"),
    ("dlogprob_median", "|Δlogprob|, median"),
    ("dlogprob_max", "|Δlogprob|, max"),
)
# every group field the page shows (an older summary lacks the control's)
GROUP_KEYS = (
    "task",
    "length_target",
    "verdict",
    "pairs",
    "token_equal",
    "divergences",
    "outside_topk",
    "first_divergence_min",
    "max_abs_dlogprob",
    "host_hit_requests",
    "accuracy_on",
    "accuracy_off",
    "control_pairs",
    "control_differing",
    "control_worst",
    "on_worse",
    "control_worse",
    "p_value",
    "reason",
)


def _differing(g: dict) -> int | None:
    pairs, equal = g.get("pairs"), g.get("token_equal")
    return pairs - equal if isinstance(pairs, int) and isinstance(equal, int) else None


def _test_words(floor: ParityFloor) -> str:
    """The verdict's test in one line: what it counts and its p against alpha."""
    return (
        f"{floor.keys} paired (sample, ask) keys: ON further from OFF in {floor.on_worse}, "
        f"control further in {floor.control_worse}, tied {floor.ties}"
        + (f"; at least {floor.min_keys} untied keys needed to decide" if floor.min_keys else "")
    )


def parity_groups(view: RunView) -> list[dict]:
    """Per variant with a parity summary: verdict (with its css: "unknown" = cannot tell), reason,
    host-hit counts, the control next to ON-vs-OFF (``spreads`` rows: label, ON, control) and the
    test (``test``: name, p, alpha, n per arm, one line), and its task groups (each with its
    reason, ON and control differing pairs, ON-worse / control-worse keys and p)."""
    out = []
    for n in view.names:
        summary = view.summary(n)
        p = summary.parity if summary is not None else None
        if not p:
            continue
        full = view.parity(n) or {}
        floor = ParityFloor.from_json(p.get("floor")) or ParityFloor.from_json(full.get("floor"))
        reasons = {(g.get("task"), g.get("length_target")): g.get("reason") for g in full.get("groups") or []}
        groups = []
        for g in p.get("groups") or []:
            g = {**dict.fromkeys(GROUP_KEYS), **g}
            g["reason"] = g["reason"] or reasons.get((g["task"], g["length_target"]))
            g["differing"] = _differing(g)
            g["css"] = VERDICT_CSS.get(g.get("verdict"), "na")
            groups.append(g)
        test = None
        spreads = []
        if floor is not None:
            on, ctl = floor.on, floor.control
            spreads = [(label, on.get(k), ctl.get(k)) for k, label in SPREAD_ROWS]
            test = {
                "name": floor.test,
                "p_value": floor.p_value,
                "alpha": floor.alpha,
                "significant": {True: "significant", False: "not significant"}.get(floor.significant, ""),
                "n_on": on.get("pairs"),
                "n_control": ctl.get("pairs"),
                "line": _test_words(floor),
            }
        out.append(
            {
                "variant": n,
                "verdict": p.get("verdict"),
                "css": VERDICT_CSS.get(p.get("verdict"), "na"),
                "reason": p.get("reason"),
                "baseline_noise": p.get("baseline_noise"),
                "host_hit_requests": p.get("host_hit_requests"),
                "on_requests": p.get("on_requests"),
                "mcnemar_p": p.get("mcnemar_p"),
                "on_lost": p.get("on_lost"),
                "on_gained": p.get("on_gained"),
                "spreads": spreads,
                "test": test,
                "groups": groups,
            }
        )
    return out


def _window(ids: list | None, d: int, k: int = 20) -> dict[str, Any]:
    ids = list(ids or [])
    lo = max(0, d - k)
    return {"before": ids[lo:d], "at": ids[d] if d < len(ids) else None, "after": ids[d + 1 : d + 1 + k], "start": lo}


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
        diffs.sort(
            key=lambda c: (_SEVERITY.get(c.get("kind"), 3), bool(c.get("noise")), c.get("first_divergence") or 0)
        )
        on_rows = view.quality_rows(n)
        off_rows = view.quality_rows(base) if base else []
        key = lambda r: (r.get("task"), r.get("length_target"), r.get("index"), r.get("seed"), r.get("ask"))
        on_by = {key(r): r for r in on_rows if r.get("arm_role", "on") == "on"}
        off_by = {key(r): r for r in off_rows if r.get("arm_role") == "off"}
        for c in diffs[:limit]:
            on, off = on_by.get(key(c)), off_by.get(key(c))
            d = int(c.get("first_divergence") or 0)
            out.append(
                {
                    "variant": n,
                    "task": c.get("task"),
                    "length": c.get("length_target"),
                    "index": c.get("index"),
                    "ask": c.get("ask"),
                    "kind": c.get("kind"),
                    "noise": c.get("noise"),
                    "divergence": d,
                    "ref_token": c.get("ref_token"),
                    "cand_token": c.get("cand_token"),
                    "max_abs_dlogprob": c.get("max_abs_dlogprob"),
                    "cached_host": c.get("cand_cached_host"),
                    "off_ids": _window((off or {}).get("output_ids"), d),
                    "on_ids": _window((on or {}).get("output_ids"), d),
                    "off_text": (off or {}).get("text"),
                    "on_text": (on or {}).get("text"),
                    "off_top": _top(off, d),
                    "on_top": _top(on, d),
                }
            )
    return out
