"""``dataflex ledger plot``: one ledger, or two before and after, drawn to a PNG a test opens."""

from __future__ import annotations

import pytest

from dataflex_core.cli import main
from dataflex_lab.testing.ledgers import recorded, step_batches

pytest.importorskip("matplotlib")


@pytest.mark.parametrize("count", [1, 2])
def test_the_plot_renders(tmp_path, capsys, count):
    from matplotlib.image import imread

    paths = []
    for k in range(count):
        path = tmp_path / f"run{k}.parquet"
        recorded(step_batches(4 + 6 * k, seed=k)).export(path)
        paths.append(str(path))
    out = tmp_path / "ledger.png"
    assert (
        main(["ledger", "plot", *paths, "-o", str(out), *(["--label", "before", "--label", "after"] * (count - 1))])
        == 0
    )
    image = imread(out)
    assert image.shape[:2] == (420, 1100)  # 11 x 4.2 inches at 100 dpi
    assert out.stat().st_size > 20_000
    assert image[..., :3].std() > 0.05  # not blank


def test_three_ledgers_or_a_bad_label_count_are_refused(tmp_path, capsys):
    path = tmp_path / "run.parquet"
    recorded(step_batches(2)).export(path)
    assert main(["ledger", "plot", str(path), str(path), str(path), "-o", str(tmp_path / "x.png")]) == 2
    assert "one ledger or two" in capsys.readouterr().err
    assert main(["ledger", "plot", str(path), "--label", "a", "--label", "b", "-o", str(tmp_path / "x.png")]) == 2
    assert "--label is given 2 times for 1 ledgers" in capsys.readouterr().err
