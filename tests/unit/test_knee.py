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
    # 8 -> 64 is three doublings: +25% in all is 1.25 ** (1/3) = 1.0772 per doubling,
    # under 1.10, so 8 is the knee (read as one doubling, +25% would not be).
    spread = find_knee([level_summary(8, 100), level_summary(64, 125)])
    assert spread.found and spread.concurrency == 8
    assert spread.growth_per_doubling == [pytest.approx(1.0772, abs=1e-4)]
    # 48 -> 64 is log2(4/3) = 0.415 of a doubling: +6% is 1.06 ** (1/0.415) = 1.1507 per
    # doubling, over 1.10, so no knee (read as one doubling, +6% would be one).
    close = find_knee([level_summary(48, 100), level_summary(64, 106)])
    assert not close.found
    assert close.growth_per_doubling == [pytest.approx(1.1507, abs=1e-4)]


def test_the_story_sweep_has_its_knee_at_64():
    # DESIGN.md's table, 32 -> 64 -> 128: 438.67 -> 757.54 (x1.727) -> 806.04 (x1.064).
    levels = [level_summary(32, 438.67), level_summary(64, 757.54), level_summary(128, 806.04)]
    knee = find_knee(levels)
    assert knee.found and knee.concurrency == 64
    assert knee.growth_per_doubling == [
        pytest.approx(1.7269, abs=1e-4),
        pytest.approx(1.0640, abs=1e-4),
    ]


def test_no_knee_when_still_growing_or_too_few_levels():
    assert not find_knee([level_summary(1, 100), level_summary(2, 190)]).found
    assert "two concurrency levels" in find_knee([level_summary(1, 100)]).explanation
