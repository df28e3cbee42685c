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
        if st.ok:
            continue
        ex = st.log_excerpt
        lines = []
        for i, text in enumerate(ex.lines):
            no = ex.first_line + i
            lines.append({"no": no, "text": text, "match": no == ex.match_line})
        out.append(
            {
                "variant": v.name,
                "state": st.state,
                "cause": st.cause,
                "cause_detail": st.cause_detail or {},
                "expect": st.expect,
                "expected": bool(st.expect_met),
                "expect_cause": st.expect_cause,
                "log_file": ex.file,
                "lines": lines,
                "attempts": st.attempts,
                "exit_code": st.exit_code,
            }
        )
    return out
