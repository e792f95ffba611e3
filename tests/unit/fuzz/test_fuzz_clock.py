# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fuzz tests' per-input bound (_mutate.Clock) stops a hang with its input named, not after it."""

from __future__ import annotations

import re
import signal
import time

import pytest

from tests.unit.fuzz import _mutate


def _spin(text, seconds=3.0):
    """A parser that hangs (for 3 s, so that a Clock without a timer returns and the test fails
    instead of hanging) and swallows every Exception, as a broad ``except`` of a parser would."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            pass
        except Exception:  # pylint: disable=broad-except
            pass
    return text


def test_a_hang_is_stopped_at_the_bound_and_names_its_input():
    before = signal.getsignal(signal.SIGALRM)
    clock = _mutate.Clock(0.2)
    start = time.monotonic()
    with pytest.raises(_mutate.Overran, match='input still running after 0.20 s .*order'):
        clock.run(_spin, 'order\n\n\nX')
    assert time.monotonic() - start < 1.5
    # The old handler is back and no timer is left to fire into the next test.
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert clock.count == 1 and clock.slowest[0] >= 0.2


def test_a_backtracking_regex_is_stopped_too():
    clock = _mutate.Clock(0.2)
    with pytest.raises(_mutate.Overran, match="'records.gz'"):
        clock.run(lambda text: re.search(r'(a|aa)+\Z', text), 'a' * 60 + 'b', about='records.gz')


def test_a_fast_input_returns_and_leaves_no_timer():
    clock = _mutate.Clock(0.2)
    assert clock.run(len, 'abc') == 3
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    time.sleep(0.3)  # a timer left armed would raise Overran here
    assert clock.count == 1 and clock.slowest[0] < 0.2


def test_an_outer_timer_is_put_back():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda _signum, _frame: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        _mutate.Clock(0.2).run(len, 'x')
        assert 0.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 0.5
        deadline = time.monotonic() + 2
        while not fired and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fired == [1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
