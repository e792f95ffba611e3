# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fuzzing and linearity of the parsers of lldptool, dcb (dcbx, pfc statistics), mlnx_qos's DCBX
mode, rdma statistic and the kernel's AER log lines (module_utils/_dcbx.py, _roce.py,
_rdma_stat.py, _aer_log.py).

Each parser gets PER_PARSER (10,000) inputs: its real fixtures (tests/fixtures/public) damaged by
tests/unit/fuzz/_mutate.py (byte flips, line drops, truncation, numbers of 400 or 5,000 digits,
unicode, NUL, runs of 4,096 blanks ...) and random bytes; none may raise, and every answer must be
JSON (what a module returns). Linearity is a ratio, not a time: the same real printout repeated
10 times more must take less than RATIO_MAX (20) times as long (a quadratic parser takes ~100x).
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _aer_log, _dcbx, _rdma_stat, _roce
from tests.unit.fuzz import _mutate

PER_PARSER = int(os.environ.get('GF_FUZZ_H16_INPUTS', '10000'))
DEADLINE_S = 1.0
RATIO_MAX = 20.0


def _lldptool(text):
    return _dcbx.parse_lldptool(text), _dcbx.lldp_willing(_dcbx.parse_lldptool(text), None)


def _dcb(text):
    parsed = {'mode': _dcbx.parse_mlnx_qos_dcbx(text), 'dcb_dcbx': _dcbx.parse_dcb_dcbx(text)}
    return parsed, _roce.parse_dcb_pfc_stats(text), _roce.parse_dcb_pfc(text), _dcbx.manager(parsed)


def _read_dcbx(text):
    """The whole DCBX read with every tool answering ``text`` (rc 0), and failing (rc 1)."""
    return (_roce.read_dcbx(lambda argv: (0, text), 'eth0', None, None, 'dcb'),
            _roce.read_dcbx(lambda argv: (1, text), 'eth0', _dcbx.parse_mlnx_qos_dcbx(text), None, 'mlnx_qos'))


# name: (parser, fixture directories)
PARSERS = {
    'lldptool': (_lldptool, ('public/lldptool',)),
    'dcb_dcbx_pfc_stats_mlnx_mode': (_dcb, ('public/dcb', 'public/mlnx_qos')),
    'read_dcbx': (_read_dcbx, ('public/lldptool', 'public/dcb', 'public/mlnx_qos')),
    'rdma_statistic': (_rdma_stat.parse_rdma_statistic, ('public/rdma_stat',)),
    'aer_log': (_aer_log.parse_aer_log, ('public/aer_log',)),
}


@pytest.mark.parametrize('name', sorted(PARSERS))
def test_parser_survives_10000_mutated_fixtures(name, record_property):
    parse, dirs = PARSERS[name]
    corpus = _mutate.fixtures(*dirs)
    assert len(corpus) >= 4, 'the fuzz needs real printouts to damage'
    clock = _mutate.Clock(DEADLINE_S)
    rng = random.Random(sum(map(ord, name)))
    count = 0
    for rng_case, data in _mutate.inputs(sum(map(ord, name)), corpus, PER_PARSER - PER_PARSER // 20):
        text = _mutate.decode(rng_case, data)
        try:
            json.dumps(clock.run(parse, text))
        except Exception as exc:  # the point of the test: name the input that raised
            pytest.fail('%s raised %r on %r' % (name, exc, text[:300]))
        count += 1
    for _case in range(PER_PARSER // 20):   # random bytes, decoded as a node's output would be
        text = bytes(rng.randrange(256) for _byte in range(rng.randrange(2000))).decode('utf-8', 'surrogateescape')
        json.dumps(clock.run(parse, text))
        count += 1
    record_property('inputs', count)
    assert count == PER_PARSER
    assert clock.slowest[0] < DEADLINE_S


def _seconds(parse, text, repeat=3):
    best = None
    for _run in range(repeat):
        start = time.process_time()
        parse(text)
        took = time.process_time() - start
        best = took if best is None else min(best, took)
    return max(best, 1e-6)


@pytest.mark.parametrize('name', sorted(PARSERS))
def test_parser_is_linear_in_its_input(name, record_property):
    """time(10x input) / time(1x) below RATIO_MAX, on the fixtures glued into ~100 kB (1x) and ~1 MB (10x):
    a parser that went back over its input per line would be ~100x."""
    parse, dirs = PARSERS[name]
    unit = '\n'.join(data.decode('utf-8', 'replace') for data in _mutate.fixtures(*dirs))
    small = unit * max(1, 100000 // len(unit))
    large = small * 10
    ratio = _seconds(parse, large) / _seconds(parse, small)
    record_property('ratio', round(ratio, 1))
    assert ratio < RATIO_MAX, '%s: 10x the input took %.1fx the time' % (name, ratio)


@pytest.mark.parametrize('name', sorted(PARSERS))
def test_parser_is_linear_on_hostile_shapes(name):
    """The shapes that make a regular expression backtrack: one huge line, only blanks, only
    newlines, one key repeated, one digit run - each 10x longer takes less than RATIO_MAX times longer."""
    parse, _dirs = PARSERS[name]
    for piece in ('x' * 50, ' ' * 50, '\n' * 50, 'link mlx5_0/1 ' * 5, 'prio-pfc ' * 5, '9' * 50,
                  'Willing: yes\n' * 3, ' 0000:00:01.0: [ 0] RxErr\n' * 2):
        small, large = piece * 400, piece * 4000
        ratio = _seconds(parse, large) / _seconds(parse, small)
        assert ratio < RATIO_MAX, '%s on %r x4000: %.1fx' % (name, piece[:20], ratio)
