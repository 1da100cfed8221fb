import math

from scheduling.engine.usage import DecayedUsage, HardWindowUsage

DAY = 86400.0


def test_the_hard_window_forgets_usage_older_than_the_window():
    u = HardWindowUsage(7 * DAY)
    u.charge("a", 0, 3600, 2.0)
    assert u.value("a", 3600) == 7200
    assert u.value("a", 7 * DAY) == 7200
    assert u.value("a", 7 * DAY + 2 * 3600) == 0.0


def test_the_hard_window_sums_overlapping_charges_per_key():
    u = HardWindowUsage(DAY)
    u.charge("a", 0, 100, 1.0)
    u.charge("a", 100, 200, 3.0)
    u.charge("b", 0, 100, 1.0)
    assert u.value("a", 200) == 400 and u.value("b", 200) == 100


def test_decayed_usage_halves_every_half_life():
    u = DecayedUsage(DAY)
    u.charge("a", 0, 1, 1000.0)
    first = u.value("a", 1)
    assert math.isclose(u.value("a", 1 + DAY), first / 2, rel_tol=1e-9)
    assert math.isclose(u.value("a", 1 + 2 * DAY), first / 4, rel_tol=1e-9)


def test_decayed_usage_of_a_constant_rate_approaches_rate_times_mean_life():
    u = DecayedUsage(DAY)
    u.charge("a", 0, 60 * DAY, 1.0)
    assert math.isclose(u.value("a", 60 * DAY), DAY / math.log(2), rel_tol=1e-6)
