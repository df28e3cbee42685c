"""``harness run``'s own numbers are checked before anything runs (--dry-run included): a shard
count of 10^20 hung --dry-run (dealing the variants out into 10^20 shards); ``--decide --pool 0``
ran the whole night and only then was refused by the final comparison (exit 2, the night's
hours spent for nothing); ``--pool`` without ``--decide`` was silently ignored."""

from __future__ import annotations

import pytest

from harness.cli import main
from tests.conftest import REPO

SMOKE = str(REPO / "scenarios" / "sim_smoke.yaml")


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--shard", "1/99999999999999999999"], "--shard: at most 10000 shards, got '1/99999999999999999999'"),
        (["--shard", "1/10001"], "--shard: at most 10000 shards, got '1/10001'"),
        (["--decide", "--pool", "0"], "--pool 0: expected 1..1000 nights"),
        (["--decide", "--pool", "-1"], "--pool -1: expected 1..1000 nights"),
        (["--decide", "--pool", "99999999999"], "--pool 99999999999: expected 1..1000 nights"),
        (["--pool", "3"], "--pool: only with --decide"),
    ],
)
def test_a_bad_run_argument_is_refused_before_anything_runs(extra, says, tmp_path, capsys):
    out = ["--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "p")]
    rc = main(["run", SMOKE, *out, *extra, "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err, err
    assert not (tmp_path / "r").exists()


def test_a_large_shard_count_still_plans(tmp_path, capsys):
    out = ["--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "p")]
    assert main(["run", SMOKE, *out, "--shard", "2/10000", "--dry-run"]) == 0, capsys.readouterr().err
