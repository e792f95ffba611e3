# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The window's readers on hostile input (issue 34): 10,000 mutated inputs each for the AER file reader
(module_utils/_aer.py), ethtool -S (module_utils/_ethtool.py) and the controller's delta of two node reads
(plugin_utils/bench/_window.py window_of, over mutated JSON reads as a node could send them), without an
uncaught exception; and each text parser linear in its input (a ratio, not a time: 1 MiB against 1 KiB).

The corpus: the real outputs of tests/fixtures/public/aer and public/ethtool and the simulator's formats
(tests/sim/tools_window.py). Inputs are seeded (tests/unit/fuzz/_mutate.py): the same on every run.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _aer, _ethtool
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _window
from tests.sim import tools_window
from tests.unit.fuzz import _mutate

COUNT = 10000
SIM_AER = tools_window.aer_text(tools_window.CORRECTABLE, {'BadTLP': 2600, 'BadDLLP': 1400}, 'TOTAL_ERR_COR').encode()
SIM_ETHTOOL = ('NIC statistics:\n' + ''.join('     %s: %d\n' % (name, index) for index, name in enumerate(tools_window.MLX5_NAMES))).encode()
PARSERS = {
    'aer': (lambda text: (_aer.parse_aer(text), _aer.parse_count(text)), ('public/aer',), (SIM_AER, b'17\n')),
    'ethtool': (lambda text: _ethtool.pfc(_ethtool.parse_stats(text)['counters']), ('public/ethtool',), (SIM_ETHTOOL,)),
}
READ = {'paths': {'mlx5_0': ['0000:17:00.0', '0000:18:00.0', '0000:1b:00.0']}, 'gpu_paths': {'0000:19:00.0': ['0000:17:00.0', '0000:19:00.0']},
        'aer': {'0000:1b:00.0': {'BadTLP': 5, 'TOTAL_ERR_COR': 5}, '0000:18:00.0': {'Timeout': 1, 'TOTAL_ERR_COR': 1},
                '0000:19:00.0': {'TOTAL_ERR_COR': 0}},
        'cc': {'mlx5_0': {'np_cnp_sent': 10, 'rp_cnp_handled': 4}}, 'pause': {'mlx5_0': {'rx_prio3_pause': 7}},
        'roce': ['mlx5_0'], 'unread': {}}
STEP = {'links': {'0000:1b:00.0': [[32.0, 16], [16.0, 16]], '0000:19:00.0': [[2.5, 16], [32.0, 16]]}, 'link_samples': 2}
SMALL, LARGE = 1 << 10, 1 << 20
RATIO_BOUND = 10 * 1024


@pytest.mark.parametrize('name', sorted(PARSERS))
def test_parser_survives_10000_mutated_inputs(name):
    parse, dirs, extra = PARSERS[name]
    corpus = _mutate.fixtures(*dirs) + list(extra)
    clock = _mutate.Clock(1.0)
    for rng, data in _mutate.inputs(sum(map(ord, name)) + 34, corpus, COUNT):
        text = _mutate.decode(rng, data)
        try:
            clock.run(parse, text)
        except Exception as exc:  # the point of the test: name the input that raised
            pytest.fail('%s raised %r on %r' % (name, exc, text[:300]))
    assert clock.count == COUNT


def _doc(rng, doc):
    """A mutated copy of ``doc`` as JSON reads it back (a text JSON refuses is no record: drawn again)."""
    while True:
        try:
            return json.loads(_mutate.mutate_json(rng, doc))
        except ValueError:
            continue


def test_window_delta_survives_10000_mutated_reads():
    """A node's reads are hostile input to the controller: any JSON in place of any value."""
    clock = _mutate.Clock(1.0)
    rng = random.Random(3418)
    for _index in range(COUNT):
        old = _doc(rng, READ) if rng.random() < 0.5 else READ
        new = _doc(rng, READ)
        step = _doc(rng, STEP) if rng.random() < 0.5 else STEP
        for hca, gpu in (('mlx5_0', '0000:19:00.0'), (None, None), (7, ['x'])):
            try:
                window = clock.run(_window.window_of, old, new, hca, gpu, rng.choice((2.0, None, 'x', -1)), step)
                _window.notable(window)
                # A records file holds any window: typed again (checked) before the rules read it.
                _window.notable(_window.checked(_doc(rng, window or READ)))
            except Exception as exc:  # the point of the test
                pytest.fail('window_of raised %r on %r' % (exc, (old, new, step)))
    assert clock.count == COUNT * 3


def _ratio(parse, small, large):
    # CPU time: the machine is shared (its wall time varies tenfold under other jobs); linearity is about the work.
    def best(text, times):
        found = None
        for _time in range(times):
            start = time.process_time()
            parse(text)
            took = time.process_time() - start
            found = took if found is None else min(found, took)
        return found
    small_s = best(small, 5)
    return min(best(large, 1) for _attempt in range(3)) / max(small_s, 1e-6)


@pytest.mark.parametrize('char', [' ', '7', 'a'], ids=['blanks', 'digits', 'letters'])
@pytest.mark.parametrize('name', sorted(PARSERS))
def test_parser_is_linear(name, char):
    """A 1 MiB run inside the lines against a 1 KiB one: about 1,024 times the work when linear, 10**6 when quadratic."""
    lines = [line for data in PARSERS[name][2] for line in data.decode().splitlines()[:6]]

    def text(run):
        return ''.join('%s%s%s\n%s %s\n' % (line[:len(line) // 2], run, line[len(line) // 2:], line, run) for line in lines)
    ratio = _ratio(PARSERS[name][0], text(char * SMALL), text(char * LARGE))
    assert ratio < RATIO_BOUND, '%s: %.0f times on 1,024 times the input' % (name, ratio)


def test_many_lines_stay_linear():
    """Many lines (an mlx5 with per-channel counters prints thousands): 100 times the lines, about 100 times the work."""
    line = '     rx_prio3_pause: 1523\n'
    ratio = _ratio(_ethtool.parse_stats, line * 300, line * 30000)
    assert ratio < 100 * 10
    ratio = _ratio(_aer.parse_aer, 'BadTLP 7\n' * 60, 'BadTLP 7\n' * 6000)
    assert ratio < 100 * 10
