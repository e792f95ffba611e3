# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The benchmark's console summary (playbooks/benchmark.yml, "Show the pairs that are not healthy")."""

from __future__ import annotations

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from tests.bench import controller_scale


def judged_mesh(work, count=16, mode='ring'):
    """bench_report's result over a synthetic ring with controller_scale's planted faults (node 9's
    rail 6 fails, node 5's rail 3 at half rate, a slow link 1-2 on rail 0, node 12's GPU memory slow)."""
    controller_scale.synth_facts(work, count, mode)
    for stage in (controller_scale.stage_plan, controller_scale.stage_records):
        if stage is controller_scale.stage_records:
            controller_scale.synth_nodes(work, count, mode)
        run, finish = stage(work, count, mode)
        finish(run())
    run, _finish = controller_scale.stage_judge(work, count, mode)
    return run()


def pair(server, client, rail, memory='host', verdict='low', **fields):
    entry = {'server': server, 'client': client, 'rail': rail, 'server_hca': 'mlx5_%d' % rail, 'client_hca': 'mlx5_%d' % rail,
             'memory': memory, 'verdict': verdict, 'bw_avg_gbps': None, 'lat_typical_us': None, 'rail_nominal_gbps': 400.0,
             'port_rate_gbps': 400.0, 'degraded_ports': [], 'reasons': []}
    entry.update(fields)
    return entry


def test_a_judged_mesh_in_plain_lines_worst_first_and_capped(tmp_path):
    bench = judged_mesh(str(tmp_path))
    lines = _bench.console_lines(bench, 20, '/out/bench.json')
    bad = sum(count for verdict, count in bench['verdicts'].items() if verdict != 'ok')
    assert lines[0] == 'ib_write_bw: %d pair test(s), %d ok, %d low, %d failed' % (
        len(bench['pairs']), bench['verdicts']['ok'], bench['verdicts']['low'], bench['verdicts']['failed'])
    assert lines[1] == '%d pair test(s) not healthy, the worst first' % bad
    shown = lines[2:-1]
    assert len(shown) == 20 and lines[-1] == '... and %d more not healthy, every pair in /out/bench.json' % (bad - 20)
    # The failed ones first (node 9's rail 6), then the lowest: node 5's rail 3 at half rate.
    failed = bench['verdicts']['failed']
    assert all(line.endswith('failed (timeout: no answer from the peer within 60 s)') and 'mlx5_6 -> ' in line
               for line in shown[:failed])
    assert shown[failed] == 'gpu0004 mlx5_3 -> gpu0005 mlx5_3, gpu memory 200.0 of 400 Gb/s (low)'
    # Readable by a person: no Python or JSON rendering of a dict or a list.
    assert not any(set(line) & set('{}[]\'"') for line in lines), lines


def test_every_pair_listed_within_the_limit(tmp_path):
    bench = judged_mesh(str(tmp_path))
    bad = len([p for p in bench['pairs'] if p['verdict'] != 'ok'])
    lines = _bench.console_lines(bench, bad)
    assert len(lines) == 2 + bad and not lines[-1].startswith('...')
    # The slow link 1-2 on rail 0 (300 of 400 Gb/s, above half rate) is among them.
    assert 'gpu0001 mlx5_0 -> gpu0002 mlx5_0, host memory 300.0 of 400 Gb/s (low)' in lines


def test_what_was_not_tested_and_why():
    assert _bench.console_lines({'skipped': 'no node reached the benchmark stage', 'pairs': [], 'verdicts': {}}) == \
        ['pair benchmark not run: no node reached the benchmark stage']
    bench = {'test': 'ib_write_bw', 'skipped': None, 'verdicts': {'failed': 1},
             'excluded': {'n10': 'no usable HCA', 'n2': 'perftest not installed'},
             'records_unreadable': {'n3': 'not a records file'},
             'pairs': [pair('n1', 'n3', 0, verdict='failed', reasons=['node_lost: the client n3 returned no result'])]}
    assert _bench.console_lines(bench, 0) == ['ib_write_bw: 1 pair test(s), 1 failed', 'left out n2 (perftest not installed)',
                                              'left out n10 (no usable HCA)', 'records of n3 unreadable (not a records file)',
                                              '... and 1 more not healthy, every pair in bench.json']


def test_pair_lines_name_what_is_low():
    gpu = pair('n1', 'n2', 0, 'gpu', bw_avg_gbps=250.0, bw_ratio=0.95, gpu_vs_host=0.64)
    assert _bench.pair_line(gpu) == 'n1 mlx5_0 -> n2 mlx5_0, gpu memory 250.0 of 400 Gb/s, 64 % of host memory (low)'
    latency = pair('n1', 'n2', 1, lat_typical_us=6.2, rail_nominal_gbps=None, port_rate_gbps=None)
    assert _bench.pair_line(latency) == 'n1 mlx5_1 -> n2 mlx5_1, host memory 6.20 us typical latency (low)'
    degraded = pair('n1', 'n2', 2, bw_avg_gbps=97.0, bw_ratio=0.24, degraded_ports=[{'host': 'n2', 'hca': 'mlx5_2'}])
    assert _bench.pair_line(degraded) == 'n1 mlx5_2 -> n2 mlx5_2, host memory 97.0 of 400 Gb/s, through a degraded port (low)'
    lost = pair('n1', 'n2', 3, verdict='failed', client_hca=None, reasons=['x' * 400])
    line = _bench.pair_line(lost)
    assert line.startswith('n1 mlx5_3 -> n2 rail 3, host memory, failed (xxx') and line.endswith('...)') and len(line) < 220
    # A test the benchmark could not set up is no device's failure: the line says so, with the cause and its node.
    held = 'cannot listen on 127.0.1.2:18514 for the benchmark beacon: Address already in use'
    broken = pair('n1', 'n2', 0, verdict='failed', failure={'kind': 'peer_lost', 'message': 'server n1 lost'},
                  server_failure={'kind': 'setup_failed', 'message': held}, reasons=['peer_lost: server n1 lost'])
    assert _bench.pair_line(broken) == ('n1 mlx5_0 -> n2 mlx5_0, host memory, not tested: the benchmark could not set it up '
                                        '(setup_failed on n1: %s)' % held)


def test_ties_in_natural_order():
    pairs = [pair('n10', 'n2', 10, verdict='failed', reasons=['timeout: x']),
             pair('n2', 'n10', 10, verdict='failed', reasons=['timeout: x']),
             pair('n2', 'n10', 2, verdict='failed', reasons=['timeout: x'])]
    lines = _bench.console_lines({'verdicts': {'failed': 3}, 'pairs': pairs}, 5)[2:]
    assert [line.split(',')[0] for line in lines] == ['n2 mlx5_2 -> n10 mlx5_2', 'n2 mlx5_10 -> n10 mlx5_10', 'n10 mlx5_10 -> n2 mlx5_10']


def test_the_limit_is_a_whole_number_from_a_string_too():
    bench = {'verdicts': {'ok': 1, 'low': 1}, 'pairs': [pair('n1', 'n2', 0, verdict='ok'), pair('n1', 'n2', 1, verdict='low')]}
    assert _bench.console_lines(bench, '0') == ['pair benchmark: 2 pair test(s), 1 ok, 1 low',
                                                '... and 1 more not healthy, every pair in bench.json']
    with pytest.raises(ValueError):
        _bench.console_lines(bench, 'twenty')
