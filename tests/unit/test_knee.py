import pytest

from servelab.diagnose import find_knee
from tests.unit.helpers import level_summary


def test_knee_is_the_level_after_which_growth_falls_under_ten_percent():
    levels = [
        level_summary(1, 100),
        level_summary(4, 380),
        level_summary(16, 900),
        level_summary(64, 950),
    ]
    knee = find_knee(levels)
    assert knee.found and knee.concurrency == 16
    assert knee.growth_per_doubling[0] == pytest.approx((380 / 100) ** 0.5)
    assert knee.growth_per_doubling[2] == pytest.approx((950 / 900) ** 0.5)


def test_doubling_exponent_uses_the_concurrency_ratio():
    # 32 -> 64 -> 128 like DESIGN.md's table: 438 -> 757 -> 806 total tok/s.
    levels = [level_summary(32, 438.67), level_summary(64, 757.54), level_summary(128, 806.04)]
    knee = find_knee(levels)
    assert knee.found and knee.concurrency == 64


def test_no_knee_when_still_growing_or_too_few_levels():
    assert not find_knee([level_summary(1, 100), level_summary(2, 190)]).found
    assert "two concurrency levels" in find_knee([level_summary(1, 100)]).explanation
