# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""ibqueryerrors' parser (module_utils/_ibdiag.py parse_ibqueryerrors) on 10,000 mutated inputs (the
real outputs of tests/fixtures/public/ibqueryerrors/ and the simulator's stand-in, damaged by
tests/unit/fuzz/_mutate.py) without an uncaught exception, each call bounded; and linear in its input:
a 1 MiB run of blanks or digits in its lines takes at most ten times the input's growth (1,024) as
long as a 1 KiB run - a ratio, not a time, as tests/unit/fuzz/test_linear_parsers.py measures."""

from __future__ import annotations

import tempfile
import time

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ibdiag
from tests.sim import fabric, tools_ibdiags
from tests.unit.fuzz import _mutate

COUNT = 10000
SMALL, LARGE = 1 << 10, 1 << 20
RATIO_BOUND = 10 * (LARGE // SMALL)


def _corpus():
    model = fabric.model(faults=('subnet_port_errors', 'flapping_link'))
    with tempfile.TemporaryDirectory() as directory:
        path = fabric.write(model, directory + '/fabric.json')
        reads = {}
        tools_ibdiags.ibqueryerrors(model, [], path, reads)
        sim = tools_ibdiags.ibqueryerrors(model, [], path, reads)[1].encode()
    return _mutate.fixtures('public/ibqueryerrors') + [sim]


def test_ibqueryerrors_survives_10000_mutated_inputs():
    clock = _mutate.Clock(2.0)
    parsed = 0
    for rng, data in _mutate.inputs(1717, _corpus(), COUNT):
        text = _mutate.decode(rng, data)
        result = clock.run(_ibdiag.parse_ibqueryerrors, text)
        assert isinstance(result['ports'], list) and isinstance(result['unparsed_count'], int)
        assert all(isinstance(v, int) and v >= 0 for p in result['ports'] for v in p['counters'].values())
        parsed += 1
    assert parsed == COUNT and clock.count == COUNT
    assert clock.slowest[0] < 2.0


def _lines():
    text = _mutate.fixtures('public/ibqueryerrors')[0].decode()
    return [line for line in text.splitlines() if line.startswith('>') and ('GUID' in line or 'Errors for' in line or '##' in line)]


def _with_runs(lines, run):
    out = []
    for line in lines:
        middle = len(line) // 2
        out.append(line[:middle] + run + line[middle:])
        out.append(line.replace(' ', run, 3))
        out.append(line + run)
    return '\n'.join(out) + '\n'


def _best(text, times):
    best = None
    for _time in range(times):
        start = time.perf_counter()
        _ibdiag.parse_ibqueryerrors(text)
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    return best


@pytest.mark.parametrize('char', [' ', '7', '[', '>'], ids=['blanks', 'digits', 'brackets', 'quotes'])
def test_ibqueryerrors_is_linear(char):
    lines = _lines()
    assert len(lines) >= 15
    small_s = _best(_with_runs(lines, char * SMALL), 5)
    large = _with_runs(lines, char * LARGE)
    ratio = None
    for _attempt in range(3):
        ratio = _best(large, 1) / max(small_s, 1e-6)
        if ratio < RATIO_BOUND:
            break
    assert ratio < RATIO_BOUND, ratio
