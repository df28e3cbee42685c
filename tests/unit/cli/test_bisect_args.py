"""``harness bisect``'s own numbers are refused before anything is made: --good-repeats beyond
what a scenario's ``repeats`` takes was taken, a folder made, the good commit checked out, and
then blamed on that commit ("the good commit cannot build")."""

from __future__ import annotations

import pytest

from harness.cli import main
from tests.conftest import REPO


@pytest.mark.parametrize("value", ["0", "1001", "99999999999999999999"])
def test_good_repeats_outside_the_repeats_range_is_refused_up_front(value, tmp_path, capsys):
    folder = tmp_path / "bisect"
    argv = ["bisect", str(REPO / "scenarios" / "sim_smoke.yaml"), "--repo", str(tmp_path / "repo")]
    rc = main([*argv, "--good", "a", "--bad", "b", "--good-repeats", value, "--dir", str(folder)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--good-repeats {value}: expected 1..1000 repeats" in err, err
    assert "cannot build" not in err and not folder.exists()
