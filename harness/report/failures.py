"""The report's failures section: every variant that did not end ``ok``.

One job: its state, cause, whether it was declared (``expect``), and the numbered log excerpt
around the matched line, from status.json.
"""

from __future__ import annotations

from harness.report.view import RunView


def failures(view: RunView) -> list[dict]:
    """Every variant not ``ok``: state, cause, expected or not, and the numbered log excerpt."""
    out = []
    for v in view.variants:
        st = view.status(v.name)
        if st.get("state") == "ok":
            continue
        ex = st.get("log_excerpt") or {}
        lines = []
        first = ex.get("first_line") or 1
        for i, text in enumerate(ex.get("lines") or []):
            lines.append({"no": first + i, "text": text, "match": first + i == ex.get("match_line")})
        out.append(
            {
                "variant": v.name,
                "state": st.get("state"),
                "cause": st.get("cause"),
                "cause_detail": st.get("cause_detail") or {},
                "expect": st.get("expect"),
                "expected": bool(st.get("expect_met")),
                "expect_cause": st.get("expect_cause"),
                "log_file": ex.get("file"),
                "lines": lines,
                "attempts": st.get("attempts"),
                "exit_code": st.get("exit_code"),
            }
        )
    return out
