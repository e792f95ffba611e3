# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import copy
import gzip
import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import read_gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices, read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench


def facts(sim_root, profile, *fault_names):
    root, _ctx = sim_root(profile, *fault_names)
    sysroot = SysRoot(root)
    return {'devices': read_ib(sysroot)}, read_gdr(sysroot, list_rdma_devices(sysroot))


def test_node_plan_nearest_gpu_per_hca(sim_root):
    ib, gdr = facts(sim_root, 'metax_c500_cx7')
    plan = _bench.node_plan(ib, gdr)
    # The 200 Gb/s BlueField-3 mlx5_2 (NODE from every GPU, another model) is a storage NIC, no rail.
    assert plan['hcas'] == ['mlx5_0', 'mlx5_1']
    assert plan['rate_gbps'] == {'mlx5_0': 400.0, 'mlx5_1': 400.0, 'mlx5_2': 200.0}
    # seed 000: GPU3 is PIX to mlx5_0, GPU4 PIX to mlx5_1 (--use_maca=N numbers MetaX GPUs in PCI order)
    assert plan['gpu_by_hca']['mlx5_0'] == {'gpu': 'GPU3', 'index': 3, 'vendor': 'metax', 'flag': 'use_maca', 'distance': 'PIX',
                                            'bdf': '0000:11:00.0'}
    assert plan['gpu_by_hca']['mlx5_1']['index'] == 4
    assert 'GPU0' == gdr['gpus'][0]['name'] and '_index' not in gdr['gpus'][0]     # the facts are left as they were


def test_node_plan_without_gpus_or_nics():
    assert _bench.node_plan({'devices': []}, {'gpus': []}) == {'hcas': [], 'rate_gbps': {}, 'active_rate_gbps': {}, 'model': {}, 'gpu_by_hca': {}}
    plan = _bench.node_plan({'devices': [{'name': 'mlx5_0', 'ports': [{'rate_gbps': 100.0}]}]}, {}, ['mlx5_0'])
    assert plan['gpu_by_hca'] == {'mlx5_0': None}


@pytest.mark.parametrize('candidates, cidr, expected', [
    (['10.7.96.17', '192.168.1.5'], '192.168.1.0/24', '192.168.1.5'),
    (['10.7.96.17', '192.168.1.5'], '10.0.0.0/8', '10.7.96.17'),
    (['not-an-ip', '172.16.50.12'], '172.16.50.0/24', '172.16.50.12'),
    (['10.7.96.17'], '172.16.0.0/12', None),
])
def test_pick_address(candidates, cidr, expected):
    assert _bench.pick_address(candidates, cidr) == expected


def test_pick_address_rejects_a_bad_cidr():
    with pytest.raises(ValueError, match='CIDR'):
        _bench.pick_address(['10.0.0.1'], '10.0.0.0/99')


def test_address_candidates_prefer_roce_gids(sim_root):
    ib, _gdr = facts(sim_root, 'metax_c500_cx7')
    assert _bench.address_candidates(ib, ['172.16.0.9', '10.7.96.17'], 'node1') == ['10.7.96.17', '172.16.0.9', 'node1']


def _ib(counters):
    return {'devices': [{'name': 'mlx5_0', 'ports': [{'counters': counters, 'hw_counters': {}}]}]}


def test_counter_delta_only_increases():
    before = _ib({'symbol_error': 3, 'link_downed': 1, 'port_rcv_errors': None})
    after = _ib({'symbol_error': 10, 'link_downed': 1, 'port_rcv_errors': 5})
    assert _bench.counter_delta(before, after, 'mlx5_0') == {'symbol_error': 7}
    assert _bench.counter_delta(before, after, 'mlx5_9') == {}


TESTS = [{'server': 'a', 'client': 'b', 'rail': 0, 'server_hca': 'mlx5_0', 'client_hca': 'mlx5_0', 'pair_id': 'a-b'},
         {'server': 'a', 'client': 'b', 'rail': 1, 'server_hca': 'mlx5_1', 'client_hca': 'mlx5_1', 'pair_id': 'a-b'}]


def test_round_records_client_side_keeps_results_and_counters():
    ok = {'item': {'item': TESTS[0]}, 'status': 'ok', 'summary': {'bw_avg_gbps': 390.0}, 'results': [{'bytes': 8}]}
    bad = {'item': {'item': TESTS[1]}, 'status': 'failed', 'failure': {'kind': 'timeout', 'message': 'killed after 60 s'}}
    records = _bench.round_records('b', TESTS, [ok, bad], [], _ib({'symbol_error': 0}), _ib({'symbol_error': 2}), 3, 'host')
    assert [(r['rail'], r['side'], r['status']) for r in records] == [(0, 'client', 'ok'), (1, 'client', 'failed')]
    assert records[0]['counters_delta'] == {'symbol_error': 2} and records[0]['round'] == 3
    assert records[1]['failure']['kind'] == 'timeout'


def test_round_records_missing_result_is_recorded_not_lost():
    records = _bench.round_records('a', TESTS[:1], [], [], {}, {}, 1, 'gpu')
    assert records[0]['side'] == 'server' and records[0]['status'] == 'not_run'
    assert records[0]['failure']['kind'] == 'peer_unreachable'


def _plan(rate):
    return {'hcas': ['mlx5_0'], 'rate_gbps': {'mlx5_0': rate}}


def _record(server, client, memory, bw, status='ok'):
    return {'side': 'client', 'round': 1, 'memory': memory, 'rail': 0, 'server': server, 'client': client,
            'hca': 'mlx5_0', 'peer_hca': 'mlx5_0', 'status': status, 'summary': {'bw_avg_gbps': bw},
            'failure': None if status == 'ok' else {'kind': 'connect_failed', 'message': 'refused'}, 'counters_delta': {}}


def test_report_verdicts_and_matrix():
    nodes = {
        'a': {'plan': _plan(400.0), 'records': []},
        'b': {'plan': _plan(400.0), 'records': [_record('a', 'b', 'host', 392.0), _record('a', 'b', 'gpu', 250.0)]},
        'c': {'plan': _plan(100.0), 'records': [_record('a', 'c', 'host', 97.0), _record('b', 'c', 'host', 50.0)]},
        'd': {'plan': _plan(400.0), 'records': [_record('a', 'd', 'host', None, status='failed')]},
    }
    result = _bench.report(copy.deepcopy(nodes), {'bw_ratio': 0.9, 'gpu_ratio': 0.9})
    verdict = dict(((p['server'], p['client'], p['memory']), p) for p in result['pairs'])
    assert verdict[('a', 'b', 'host')]['verdict'] == 'ok' and verdict[('a', 'b', 'host')]['bw_ratio'] == 0.98
    # Judged against the rail's nominal rate (400 on three of the four nodes), not the slower (100G) port.
    low = verdict[('a', 'c', 'host')]
    assert (low['verdict'], low['port_rate_gbps'], low['rail_nominal_gbps'], low['bw_ratio']) == ('low', 100.0, 400.0, 0.242)
    assert low['degraded_ports'] == [{'host': 'c', 'hca': 'mlx5_0', 'rate_gbps': 100.0}]
    assert low['reasons'] == ['97.0 Gb/s is 24 % of the 400 Gb/s nominal rate of rail 0 (threshold 90 %)',
                              'below the rail\'s nominal 400 Gb/s: c mlx5_0 at 100 Gb/s']
    assert verdict[('a', 'b', 'host')]['degraded_ports'] == []
    assert verdict[('b', 'c', 'host')]['verdict'] == 'low'
    assert verdict[('a', 'b', 'gpu')]['verdict'] == 'low' and verdict[('a', 'b', 'gpu')]['gpu_vs_host'] == 0.638
    assert 'of host memory' in verdict[('a', 'b', 'gpu')]['reasons'][-1]
    assert verdict[('a', 'd', 'host')]['verdict'] == 'failed' and 'connect_failed' in verdict[('a', 'd', 'host')]['reasons'][0]
    assert result['matrix']['host']['0']['a'] == {'b': 392.0, 'c': 97.0, 'd': None}
    assert result['verdicts'] == {'ok': 1, 'low': 3, 'failed': 1}


def _rails_plan(rates, models=None, active=None):
    hcas = ['mlx5_%d' % i for i in range(len(rates))]
    plan = {'hcas': hcas, 'rate_gbps': dict(zip(hcas, rates))}
    if models is not None:
        plan.update(model=dict(zip(hcas, models)), active_rate_gbps=dict(zip(hcas, active or rates)))
    return plan


def _bench_mesh(plans, bw):
    """Every ordered pair on every rail, host memory, at ``bw(server, client, rail)``."""
    nodes = dict((host, {'plan': plan, 'records': []}) for host, plan in plans.items())
    for server in sorted(plans):
        for client in sorted(plans):
            for rail in range(len(plans[client]['hcas'])) if server != client else ():
                record = dict(_record(server, client, 'host', bw(server, client, rail)), rail=rail,
                              hca='mlx5_%d' % rail, peer_hca='mlx5_%d' % rail)
                nodes[client]['records'].append(record)
    return nodes


def test_report_judges_a_pair_against_its_rails_nominal_rate():
    # c's rail 0 trained at 1X (100 of 400 Gb/s): its tests reach 97 Gb/s, 97 % of the slower port -
    # and 24 % of what rail 0 of the fleet runs at. Its other rail and the other pairs of rail 0 are fine.
    model = ['MT4129 MT_0000000838 InfiniBand'] * 2
    plans = {'a': _rails_plan([400.0, 400.0], model), 'b': _rails_plan([400.0, 400.0], model),
             'c': _rails_plan([100.0, 400.0], model)}
    nodes = _bench_mesh(plans, lambda server, client, rail: 97.0 if rail == 0 and 'c' in (server, client) else 392.0)
    assert _bench.rail_nominal(nodes) == {('0', model[0]): 400.0, ('1', model[0]): 400.0}
    pairs = dict(((p['server'], p['client'], p['rail']), p) for p in _bench.report(nodes, {})['pairs'])
    assert sorted(k for k, p in pairs.items() if p['verdict'] != 'ok') == [('a', 'c', 0), ('b', 'c', 0), ('c', 'a', 0), ('c', 'b', 0)]
    assert pairs[('c', 'a', 0)]['degraded_ports'] == [{'host': 'c', 'hca': 'mlx5_0', 'rate_gbps': 100.0}]
    assert pairs[('c', 'a', 0)]['rail_nominal_gbps'] == 400.0 and pairs[('c', 'a', 0)]['port_rate_gbps'] == 100.0
    assert pairs[('c', 'a', 1)]['degraded_ports'] == [] and pairs[('a', 'b', 0)]['bw_ratio'] == 0.98


def test_rail_nominal_rate_is_the_mode_of_active_ports_per_model():
    # Two nodes, one at 1X: a tie goes to the higher rate (a lone healthy peer still sets the bar).
    two = _bench_mesh({'a': _plan(400.0), 'b': _plan(100.0)}, lambda *_: 97.0)
    assert set(p['verdict'] for p in _bench.report(two, {})['pairs']) == {'low'}
    # The most common rate wins: two ports at 200 of three, the 400 one is judged against 200 (not low).
    three = _bench_mesh({'a': _plan(200.0), 'b': _plan(200.0), 'c': _plan(400.0)}, lambda *_: 196.0)
    assert [(p['verdict'], p['rail_nominal_gbps'], p['degraded_ports']) for p in _bench.report(three, {})['pairs']] == \
        [('ok', 200.0, [])] * 6
    # A port that is down reads a rate it does not run at: not counted, and not "degraded" (it is down).
    model = ['M'] * 1
    down = {'a': _rails_plan([400.0], model), 'b': _rails_plan([400.0], model),
            'c': _rails_plan([10.0], model, active=[None]), 'd': _rails_plan([10.0], model, active=[None])}
    assert _bench.rail_nominal(_bench_mesh(down, lambda *_: 0.0)) == {('0', 'M'): 400.0}
    pairs = _bench.report(_bench_mesh(down, lambda *_: 392.0), {})['pairs']
    assert set(str(p['degraded_ports']) for p in pairs) == {'[]'}
    # Ports of two models on one rail are their own peers: 200 Gb/s cards beside 400 Gb/s ones are not degraded;
    # a pair across the two models is judged against the slower model's nominal rate.
    mixed = {'a': _rails_plan([200.0], ['CX6']), 'b': _rails_plan([200.0], ['CX6']),
             'c': _rails_plan([400.0], ['CX7']), 'd': _rails_plan([400.0], ['CX7']), 'e': _rails_plan([400.0], ['CX7'])}
    pairs = dict(((p['server'], p['client']), p) for p in _bench.report(
        _bench_mesh(mixed, lambda s, c, r: 392.0 if {s, c} <= {'c', 'd', 'e'} else 196.0), {})['pairs'])
    assert set(p['verdict'] for p in pairs.values()) == {'ok'} and set(str(p['degraded_ports']) for p in pairs.values()) == {'[]'}
    assert (pairs[('a', 'c')]['rail_nominal_gbps'], pairs[('c', 'd')]['rail_nominal_gbps']) == (200.0, 400.0)


def test_a_degraded_port_adds_its_text_without_replacing_the_verdict():
    # c's rail 0 is degraded (1X). A failed test through it stays failed; a latency test through it is still judged.
    model = ['M']
    plans = {'a': _rails_plan([400.0], model), 'b': _rails_plan([400.0], model), 'c': _rails_plan([100.0], model)}
    nodes = _bench_mesh(plans, lambda *_: 392.0)
    for record in nodes['c']['records']:
        if record['server'] == 'a':
            record.update(status='failed', failure={'kind': 'connect_failed', 'message': 'refused'},
                          summary={'bw_avg_gbps': None, 'lat_typical_us': 3.0})
        else:
            record['summary'] = {'bw_avg_gbps': None, 'lat_typical_us': 40.0}
    # A failed test between healthy ports that left a latency summary stays failed too.
    nodes['b']['records'][0].update(status='failed', failure={'kind': 'timeout', 'message': 'killed'},
                                    summary={'bw_avg_gbps': None, 'lat_typical_us': 40.0})
    pairs = dict(((p['server'], p['client']), p) for p in _bench.report(nodes, {'lat_max_us': 10})['pairs'])
    assert pairs[('a', 'c')]['verdict'] == 'failed' and pairs[('a', 'c')]['degraded_ports']
    assert (pairs[('a', 'b')]['verdict'], pairs[('a', 'b')]['degraded_ports']) == ('failed', [])
    assert pairs[('b', 'c')]['verdict'] == 'low' and pairs[('b', 'c')]['reasons'] == [
        'typical latency 40.00 us above 10.00 us', 'below the rail\'s nominal 400 Gb/s: c mlx5_0 at 100 Gb/s']


def test_report_without_a_nominal_rate_falls_back_to_the_port_rate():
    # One node per model on the rail: its nominal rate is its own rate (the old bar, the slower port's).
    alone = _bench.report(_bench_mesh({'a': _rails_plan([400.0], ['X']), 'b': _rails_plan([100.0], ['Y'])}, lambda *_: 97.0), {})
    assert [(p['verdict'], p['rail_nominal_gbps'], p['degraded_ports']) for p in alone['pairs']] == [('ok', 100.0, [])] * 2
    # No rate known anywhere: no bandwidth verdict, as before (no ratio, nothing called degraded).
    unknown = _bench.report(_bench_mesh({'a': {'hcas': ['mlx5_0']}, 'b': {'hcas': ['mlx5_0']}}, lambda *_: 97.0), {})
    assert [(p['port_rate_gbps'], p['rail_nominal_gbps'], p.get('bw_ratio'), p['degraded_ports']) for p in unknown['pairs']] == \
        [(None, None, None, [])] * 2


def test_node_plan_keeps_active_rates_and_models(sim_root):
    ib, gdr = facts(sim_root, 'nvidia_h100_8x_ndr', 'port_polling')
    plan = _bench.node_plan(ib, gdr)
    # port_polling takes the first rail down: it reads 10 Gb/sec (4X SDR) but runs at nothing.
    assert plan['rate_gbps']['mlx5_0'] == 10.0 and plan['active_rate_gbps']['mlx5_0'] is None
    assert plan['active_rate_gbps']['mlx5_1'] == 400.0
    assert len(set(plan['model'][hca] for hca in plan['hcas'])) == 1 and plan['model']['mlx5_0']


def test_a_1x_port_is_low_and_explained_by_its_rate_on_its_own_rail():
    """Issue 22: a 1X link's 97 Gb/s cells were green on a 400 Gb/s rail. Three nodes, b's rail 0 at 1X:
    its pairs on rail 0 are BENCH_PAIR_LOW explained by IB_RATE_DEGRADED on b's mlx5_0; the other rails are ok."""
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
    from tests.bench import diagnosis_accuracy
    healthy = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
    degraded = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('rate_degraded_1x',))
    nodes = {'a': healthy, 'b': degraded, 'c': copy.deepcopy(healthy)}
    bench, _causes = diagnosis_accuracy.pair_bench(nodes, {'b': (['rate_degraded_1x'], ['mlx5_0'])})
    low = [p for p in bench['pairs'] if p['verdict'] != 'ok']
    assert low and set((p['rail'], p['verdict']) for p in low) == {(0, 'low')}
    assert all('b' in (p['server'], p['client']) for p in low) and len(low) == 8      # 4 ordered pairs x 2 memories
    assert all(p['degraded_ports'] == [{'host': 'b', 'hca': 'mlx5_0', 'rate_gbps': 100.0}] for p in low)
    found = _diagnose.diagnose(nodes, bench)
    (root,) = [f for f in found if f['code'] == 'IB_RATE_DEGRADED']
    assert (root['host'], root['subject']) == ('b', 'mlx5_0/1')
    symptoms = [f for f in found if f['code'] in _diagnose.PAIR_SYMPTOMS]
    assert len(symptoms) == 8 and set(f['code'] for f in symptoms) == {'BENCH_PAIR_LOW'}
    assert set(f['explained_by'] for f in symptoms) == {root['id']}


ROUNDS = [{'round': 1, 'tests': TESTS}, {'round': 2, 'tests': []},
          {'round': 3, 'tests': [dict(TESTS[0], server='c', client='a', pair_id='a-c')]}]
PLANS = {'a': {'address': '10.0.0.1', 'gpu_by_hca': {'mlx5_0': {'flag': 'use_cuda', 'index': 3, 'gpu': '0000:1a:00.0'}}},
         'b': {'address': '10.0.0.2'}, 'c': {'address': '10.0.0.3'}}


def test_sequence_steps_every_round_of_every_memory_with_peer_addresses_and_gpus():
    steps = _bench.sequence_steps('a', ROUNDS, PLANS, ['host', 'gpu'], 18515)
    # Every node gets every step (empty ones too): step numbers must agree across nodes.
    assert [(s['memory'], s['round'], len(s['tests'])) for s in steps] == [
        ('host', 1, 2), ('host', 2, 0), ('host', 3, 1), ('gpu', 1, 2), ('gpu', 2, 0), ('gpu', 3, 1)]
    first = steps[0]['tests'][1]
    assert (first['side'], first['peer'], first['peer_name'], first['device'], first['tcp_port']) == \
        ('server', '10.0.0.2', 'b', 'mlx5_1', 18516)
    assert steps[2]['tests'][0]['side'] == 'client' and steps[2]['tests'][0]['peer'] == '10.0.0.3'
    assert 'use_cuda' not in steps[0]['tests'][0]
    assert steps[3]['tests'][0]['use_cuda'] == 3 and 'use_cuda' not in steps[3]['tests'][1]   # no GPU near mlx5_1
    assert _bench.sequence_steps('b', ROUNDS, PLANS, ['host'], 18515)[2]['tests'] == []


def test_sequence_records_with_counters_per_step_and_a_lost_node():
    steps = _bench.sequence_steps('b', ROUNDS, PLANS, ['host'], 18515)
    ok = dict(steps[0]['tests'][0], status='ok', summary={'bw_avg_gbps': 390.0}, results=[{'bytes': 8}], elapsed_s=1.5,
              settings={'device': 'mlx5_0', 'mtu_bytes': 4096, 'qps': 1}, tool_warnings=['Requested mtu is higher'])
    lost = dict(steps[0]['tests'][1], status='failed', failure={'kind': 'peer_lost', 'message': 'server a lost'})
    result = {'counters_start': _ib({'symbol_error': 1}),
              'steps': [{'step': 1, 'tests': [ok, lost], 'counters': _ib({'symbol_error': 4})},
                        {'step': 2, 'tests': [], 'counters': _ib({'symbol_error': 9})},
                        {'step': 3, 'tests': [], 'counters': _ib({'symbol_error': 9})}]}
    records = _bench.sequence_records('b', steps, result)
    assert [(r['side'], r['rail'], r['status']) for r in records] == [('client', 0, 'ok'), ('client', 1, 'failed')]
    assert records[0]['counters_delta'] == {'symbol_error': 3} and records[0]['summary']['bw_avg_gbps'] == 390.0
    assert records[1]['failure']['kind'] == 'peer_lost' and records[0]['results'] == [{'bytes': 8}]
    # perftest's banner is not kept (the judging reads none of it), its warnings are.
    assert 'settings' not in records[0] and records[0]['warnings'] == ['Requested mtu is higher']
    # The task itself failed or the node was lost: every planned test is recorded as such.
    gone = _bench.sequence_records('b', steps, {'unreachable': True, 'msg': 'Failed to connect'})
    assert [(r['status'], r['failure']['kind']) for r in gone] == [('failed', 'node_lost')] * 2


def test_report_keeps_a_pair_whose_client_node_was_lost():
    server_record = {'side': 'server', 'round': 1, 'memory': 'host', 'rail': 0, 'server': 'a', 'client': 'b',
                     'hca': 'mlx5_0', 'peer_hca': 'mlx5_0', 'status': 'failed',
                     'failure': {'kind': 'peer_lost', 'message': 'client b lost'}, 'counters_delta': {}}
    result = _bench.report({'a': {'plan': _plan(400.0), 'records': [server_record]}, 'b': {'plan': _plan(400.0), 'records': []}}, {})
    assert [(p['server'], p['client'], p['verdict']) for p in result['pairs']] == [('a', 'b', 'failed')]
    reason = result['pairs'][0]['reasons'][0]
    assert reason.startswith('node_lost: the client b returned no result (node lost') and 'peer_lost: client b lost' in reason
    assert result['matrix']['host']['0']['a'] == {'b': None}


def test_fleet_plan_leaves_out_what_cannot_run_and_says_why():
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench._bench import fleet_plan
    found = {'status': 'skipped', 'skipped': True, 'cmd': ['/usr/bin/ib_write_bw']}
    missing = {'failed': True, 'msg': 'ib_write_bw not found on PATH: install perftest'}
    plan = fleet_plan({'a': {'plan': {'hcas': ['mlx5_0']}, 'tool': found},
                       'b': {'plan': {'hcas': []}, 'tool': {'skipped': True, 'skip_reason': 'Conditional result was False'}},
                       'c': {'plan': {'hcas': ['mlx5_0']}, 'tool': missing},
                       'd': {'plan': {'hcas': ['mlx5_0', 'mlx5_1']}, 'tool': found}})
    assert plan['nodes'] == ['a', 'd'] and plan['skipped'] is None
    assert plan['excluded'] == {'b': 'no RDMA device (HCA) to test on this node',
                                'c': 'perftest cannot run here: ib_write_bw not found on PATH: install perftest'}
    alone = fleet_plan({'a': {'plan': {'hcas': ['mlx5_0']}, 'tool': found}})
    assert alone['nodes'] == ['a'] and alone['skipped'] == '1 node(s) can run perftest with an RDMA device (a); a pair needs two'
    assert fleet_plan({})['skipped'].startswith('0 node(s)')


def test_report_reads_the_server_side_of_each_pair():
    """What a pair takes from its server's record (read in a first pass, kept per pair): the
    farther GPU<->HCA distance of the two sides, the server's failure as the cause of its client's,
    and a pair whose client reported other records but not this one."""
    def server(client, memory, rail=0, failure=None, distance=None):
        return dict(_record('a', client, memory, None, status='failed' if failure else 'ok'), side='server', rail=rail,
                    failure=failure, gpu={'distance': distance} if distance else None)
    busy = {'kind': 'port_busy', 'message': 'Couldn\'t listen to port 18515'}
    nodes = {
        'a': {'plan': _plan(400.0), 'records': [server('b', 'gpu', distance='SYS'), server('b', 'host', failure=busy),
                                                server('c', 'host', rail=1)]},
        'b': {'plan': _plan(400.0), 'records': [dict(_record('a', 'b', 'gpu', 390.0), gpu={'distance': 'PIX'}),
                                                _record('a', 'b', 'host', None, status='failed')]},
        'c': {'plan': _plan(400.0), 'records': [_record('a', 'c', 'host', 391.0)]},
    }
    result = _bench.report(copy.deepcopy(nodes), {})
    pairs = dict(((p['client'], p['memory'], p['rail']), p) for p in result['pairs'])
    assert pairs[('b', 'gpu', 0)]['gpu_distance'] == 'SYS'
    assert pairs[('b', 'host', 0)]['server_failure'] == busy and 'server side port_busy' in pairs[('b', 'host', 0)]['reasons'][1]
    missing = pairs[('c', 'host', 1)]
    assert missing['verdict'] == 'failed' and missing['failure']['kind'] == 'no_client_record'
    assert (missing['server_hca'], missing['client_hca']) == ('mlx5_0', 'mlx5_0') and result['matrix']['host']['1']['a'] == {'c': None}
    assert len(result['pairs']) == 4


@pytest.mark.parametrize('host, name', [
    ('gpu01', 'gpu01.records.json.gz'),
    ('node-7.rack_2', 'node-7.rack_2.records.json.gz'),
    ('../etc/passwd', '..%2Fetc%2Fpasswd.records.json.gz'),
    ('..', '...records.json.gz'),
    ('a b\x00', 'a%20b%00.records.json.gz'),
    ('gpü', 'gp%C3%BC.records.json.gz'),
    ('', '_.records.json.gz'),
])
def test_records_file_name_is_one_plain_file(host, name):
    assert _bench.records_file_name(host) == name
    assert '/' not in name and name not in ('.', '..')


def _mesh():
    """Three nodes' records: a pair measured, a pair whose server failed, a pair whose client is c."""
    def server(client, rail=0, failure=None):
        return dict(_record('a', client, 'host', None, status='failed' if failure else 'ok'), side='server', rail=rail,
                    failure=failure)
    busy = {'kind': 'port_busy', 'message': 'Couldn\'t listen to port 18515'}
    return {
        'a': {'plan': _plan(400.0), 'records': [server('b'), server('b', rail=1, failure=busy), server('c')]},
        'b': {'plan': _plan(400.0), 'records': [_record('a', 'b', 'host', 390.0),
                                                dict(_record('a', 'b', 'host', None, status='failed'), rail=1)]},
        'c': {'plan': _plan(400.0), 'records': [_record('a', 'c', 'host', 200.0)]},
    }


def test_report_from_records_files_is_the_report_from_hostvars(tmp_path):
    nodes = _mesh()
    expected = _bench.report(copy.deepcopy(nodes), {})
    from_files = {}
    for host, node in nodes.items():
        path = _bench.write_records(str(tmp_path / 'records'), host, node['records'], 'gf-1-2')
        assert path == str(tmp_path / 'records' / ('%s.records.json.gz' % host))
        from_files[host] = {'plan': node['plan'], 'records': [], 'records_file': path, 'run_id': 'gf-1-2'}
    assert _bench.report(from_files, {}) == expected
    assert 'records_unreadable' not in expected
    # Private to the user running ansible-playbook, and no temporary file left behind.
    assert oct(os.stat(path).st_mode & 0o777) == '0o600' and oct(os.stat(str(tmp_path / 'records')).st_mode & 0o777) == '0o700'
    assert sorted(os.listdir(str(tmp_path / 'records'))) == ['a.records.json.gz', 'b.records.json.gz', 'c.records.json.gz']


def test_a_records_file_that_cannot_be_trusted_is_no_result_with_the_reason(tmp_path):
    nodes = _mesh()
    directory = str(tmp_path)
    for host in nodes:
        nodes[host]['records_file'] = _bench.write_records(directory, host, nodes[host].pop('records'), 'run-2')
        nodes[host]['run_id'] = 'run-2'
    # c's file is from an earlier run; b's holds a's records; nothing at all for the last one.
    _bench.write_records(directory, 'c', [_record('a', 'c', 'host', 391.0)], 'run-1')
    with open(nodes['a']['records_file'], 'rb') as source, open(nodes['b']['records_file'], 'wb') as target:
        target.write(source.read())
    result = _bench.report(nodes, {})
    assert sorted(result['records_unreadable']) == ['b', 'c']
    assert 'from run \'run-1\', not from this run (run-2)' in result['records_unreadable']['c']
    assert 'holds the records of \'a\', not of b' in result['records_unreadable']['b']
    pairs = dict(((p['client'], p['rail']), p) for p in result['pairs'])
    # Fail closed: no pair of theirs is ok, and each says why.
    assert [pairs[key]['verdict'] for key in (('b', 0), ('b', 1), ('c', 0))] == ['failed'] * 3
    assert pairs[('c', 0)]['failure']['kind'] == 'node_lost' and 'not from this run' in pairs[('c', 0)]['reasons'][0]
    with open(nodes['c']['records_file'], 'wb') as handle:
        handle.write(b'\x1f\x8b\x08\x00 not gzip after all')
    os.unlink(nodes['b']['records_file'])
    result = _bench.report(nodes, {})
    assert 'cannot be read' in result['records_unreadable']['c'] and 'cannot be read' in result['records_unreadable']['b']
    with gzip.open(nodes['c']['records_file'], 'wb') as handle:
        handle.write(b'{"records": []}')
    with pytest.raises(ValueError, match='not a records file'):
        _bench.read_records(nodes['c']['records_file'], 'c')


def test_sequence_records_are_the_same_when_unchanged_counters_come_as_their_read_time():
    """perftest_run sends counters_same_at for a step whose error counters did not change: the
    records, counter increases and seconds between reads included, are those of the full reads."""
    steps = _bench.sequence_steps('b', ROUNDS, PLANS, ['host', 'gpu'], 18515)

    def read(at, symbol_error, link_downed=0):
        ib = _ib({'symbol_error': symbol_error, 'link_downed': link_downed})
        ib['devices'][0]['ports'][0]['counters_read_at'] = at
        ib['devices'].append({'name': 'mlx5_1', 'ports': [{'counters': {'symbol_error': 7}, 'hw_counters': {},
                                                           'counters_read_at': at}]})
        return ib
    reads = [read(10.0, 1), read(12.5, 1), read(15.0, 6), read(17.5, 6), read(20.0, 6, 1), read(22.5, 6, 1), read(25.0, 6, 1)]
    done = []
    for number, step in enumerate(steps, 1):
        tests = [dict(test, status='ok', summary={'bw_avg_gbps': 390.0}, results=[]) for test in step['tests']]
        done.append({'step': number, 'tests': tests, 'counters': reads[number]})
    full = {'counters_start': reads[0], 'steps': done}
    compact = {'counters_start': reads[0], 'steps': copy.deepcopy(done)}
    last = reads[0]
    for step in compact['steps']:
        if _bench.counter_delta(last, step['counters'], 'mlx5_0') == {} and step['counters']['devices'][0]['ports'][0][
                'counters'] == last['devices'][0]['ports'][0]['counters']:
            step['counters_same_at'] = step.pop('counters')['devices'][0]['ports'][0]['counters_read_at']
        else:
            last = step['counters']
    assert [('counters' in s) for s in compact['steps']] == [False, True, False, True, False, False]
    records = _bench.sequence_records('b', steps, compact)
    assert records == _bench.sequence_records('b', steps, full)
    # b's mlx5_0 tests run in steps 1 (host, round 1) and 4 (gpu, round 1); the rise of step 2 has no test of b's.
    assert [(r['memory'], r['counters_delta'], r['counters_seconds']) for r in records if r['hca'] == 'mlx5_0'] == [
        ('host', {}, 2.5), ('gpu', {'link_downed': 1}, 2.5)]


def test_sequence_records_keep_the_kind_of_a_sequence_that_could_not_start():
    steps = _bench.sequence_steps('b', ROUNDS, PLANS, ['host'], 18515)
    message = 'cannot listen on 127.0.1.2:18514 for the benchmark beacon: Address already in use'
    taken = _bench.sequence_records('b', steps, {'failed': True, 'msg': message,
                                                 'failure': {'kind': 'setup_failed', 'message': message}})
    assert [(r['failure']['kind'], r['failure']['message']) for r in taken] == [('setup_failed', message)] * 2
    # A kind perftest_run does not give for a set-up failure is not taken over: the task failed.
    other = _bench.sequence_records('b', steps, {'failed': True, 'msg': 'x', 'failure': {'kind': 'mr_failed'}})
    assert set(r['failure']['kind'] for r in other) == {'task_failed'}


def _failed(client=None, server=None, **more):
    pair = dict({'server': 'a', 'client': 'b', 'rail': 0, 'memory': 'host', 'status': 'failed', 'verdict': 'failed',
                 'failure': client}, **more)
    if server is not None:
        pair['server_failure'] = server
    return pair


BEACON = {'kind': 'setup_failed', 'message': 'cannot listen on 127.0.1.1:18514 for the benchmark beacon: Address already in use'}


@pytest.mark.parametrize('pair, host, kind', [
    # The client's own node could not start its sequence; or its server's, and the client only lost the beacon.
    (_failed(BEACON), 'b', 'setup_failed'),
    (_failed({'kind': 'peer_lost', 'message': 'server a lost'}, BEACON), 'a', 'setup_failed'),
    # perftest's server could not listen on its TCP port (in use): the client was refused.
    (_failed({'kind': 'connect_failed', 'message': "Couldn't connect to 127.0.1.1:18515"},
             {'kind': 'connect_failed', 'message': "Couldn't listen to port 18515"}), 'a', 'connect_failed'),
    (_failed({'kind': 'tool_missing', 'message': 'ib_write_bw not found on PATH'}), 'b', 'tool_missing'),
    (_failed({'kind': 'bad_arguments', 'message': 'unrecognized option'}), 'b', 'bad_arguments'),
])
def test_a_failure_before_the_hardware_is_the_runs(pair, host, kind):
    cause = _bench.not_reached(pair)
    assert (cause['host'], cause['kind']) == (host, kind)


@pytest.mark.parametrize('pair', [
    # The device's: a port down, a buffer refused, a hang, a lost node, a client refused by a server that died on its device.
    _failed({'kind': 'context_failed', 'message': 'Port number 1 state is DOWN'}),
    _failed({'kind': 'exchange_failed', 'message': "Couldn't read remote address"}, {'kind': 'mr_failed', 'message': "Couldn't allocate MR"}),
    _failed({'kind': 'timeout', 'message': 'killed after 120 s'}),
    _failed({'kind': 'node_lost', 'message': 'the client b returned no result'}),
    _failed({'kind': 'connect_failed', 'message': "Couldn't connect to 127.0.1.1:18515"},
            {'kind': 'no_device', 'message': 'IB device mlx5_0 not found'}),
    # A refused connection alone says nothing of why: not called the run's.
    _failed({'kind': 'connect_failed', 'message': "Couldn't connect to 127.0.1.1:18515"}),
    # A task that failed somehow (still running after its budget: a hang) is no set-up failure.
    _failed({'kind': 'task_failed', 'message': 'perftest_run was still running on b after 600 s'}),
    # Not failed: nothing to classify.
    dict(_failed(BEACON), verdict='low', status='ok'),
])
def test_a_failure_on_the_hardware_is_not_the_runs(pair):
    assert _bench.not_reached(pair) is None


def test_the_cause_of_a_failed_pair_is_the_end_that_failed_first():
    refused = _failed({'kind': 'exchange_failed', 'message': "Couldn't read remote address"},
                      {'kind': 'mr_failed', 'message': "Couldn't allocate MR"}, memory='gpu')
    assert _bench.failure_cause(refused) == {'side': 'server', 'host': 'a', 'kind': 'mr_failed',
                                             'message': "Couldn't allocate MR", 'hosts': ['a']}
    # Both ends could not register: both are named.
    both = _failed({'kind': 'mr_failed', 'message': 'x'}, {'kind': 'mr_failed', 'message': 'y'})
    assert _bench.failure_cause(both)['hosts'] == ['a', 'b'] and _bench.failure_cause(both)['side'] == 'client'
    assert _bench.failure_cause(_failed(None)) is None
