# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The differential diagnosis (plugins/plugin_utils/diagnosis/rules/_differential.py, _profile.py): a slow
node that no root explains is compared with its healthy peers, or with its own earlier healthy report
(gpu_fabric_baseline), on the real runs of two H200 (tests/fixtures/real/h200x2/state/, its README says
how each ran); and a fleet symptom is explained by its worst culprit."""

from __future__ import annotations

import copy
import json
import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective, _nccl
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _findings as F, _profile
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules import _differential
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report, _report_stage

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(HERE, '..', '..', '..', 'fixtures', 'real', 'h200x2', 'state')
SPLIT = os.path.join(HERE, '..', '..', '..', 'fixtures', 'real', 'h200x4-split')


def result(name, env=None, where=STATE):
    """A node's collective_bench result from a real log (as test__collective_evidence builds it)."""
    with open(os.path.join(where, name)) as handle:
        parsed = _nccl.parse_any(handle.read())
    status, failure = _nccl.outcome(parsed)
    out = dict((key, parsed[key]) for key in ('benchmark', 'ranks', 'hosts', 'versions', 'results', 'avg_busbw_gbs',
                                              'max_busbw_gbs', 'wrong_total', 'out_of_bounds', 'transport'))
    out.update(status=status, failure=failure, env=env if env is not None else {'NCCL_NVLS_ENABLE': '0'},
               verdict={'status': 'unknown', 'reasons': []})
    return out


def gpu_state(processes=(), driver='580.159.04', reasons=('gpu_idle',)):
    """gpu_fabric_gpu of the node of the fixtures (two H200, contract of gpu_state_facts)."""
    gpus = [{'bdf': bdf, 'index': index, 'name': 'NVIDIA H200', 'vbios': '96.00.AF.00.01', 'power_limit_w': 700.0,
             'sm_clock_max_mhz': 1980, 'mem_clock_max_mhz': 3201, 'clock_reasons': list(reasons), 'pcie_width': 16,
             'nvlink': {'links': 18, 'active': 18, 'inactive': [], 'speed_gbs': 26.562, 'errors': {}}}
            for index, bdf in enumerate(('0000:00:06.0', '0000:00:07.0'))]
    return {'tool': 'nvidia-smi', 'driver_version': driver, 'gpus': gpus, 'xid': [], 'not_read': {},
            'processes': [{'bdf': '0000:00:07.0', 'pid': 4242, 'name': name, 'used_mib': 1653, 'user': 'root'} for name in processes]}


def node(gpu=None, kernel='6.18.0', nccl=None):
    facts = {'ib': None, 'gdr': {'gpus': [{'name': 'GPU0', 'pci_address': '0000:00:06.0'}, {'name': 'GPU1', 'pci_address': '0000:00:07.0'}],
                                 'kernel': {'release': kernel}, 'host': {'cpu_governors': {'performance': 16}, 'modules_loaded': ['nvidia']}}}
    if gpu is not None:
        facts['gpu'] = gpu
    if nccl is not None:
        facts['nccl'] = nccl
    return facts


def run(runs, nodes, **kwargs):
    local = _collective.judge_nodes(runs)
    found = _diagnose.diagnose(nodes, collective={'nodes': local}, **kwargs)
    return dict((f['id'].split('/')[0], f) for f in found), found


@pytest.mark.parametrize('log, variable, value', [
    ('nccl_maxnch1.txt', 'NCCL_MAX_NCHANNELS', '1'),
    ('nccl_proto_ll.txt', 'NCCL_PROTO', 'LL'),
    # From NCCL_CONF_FILE, ~/.nccl.conf and /etc/nccl.conf: NCCL logs each as set by environment.
    ('nccl_conffile.txt', 'NCCL_MAX_NCHANNELS', '2'),
    ('nccl_homeconf.txt', 'NCCL_PROTO', 'Simple'),
    ('nccl_buffsize.txt', 'NCCL_BUFFSIZE', '65536'),
])
def test_a_setting_only_the_slow_node_had_is_its_root(log, variable, value):
    by, found = run({'nodeA': result('nccl_healthy.txt'), 'nodeB': result(log), 'nodeC': result('nccl_healthy.txt')},
                    {'nodeA': node(gpu_state()), 'nodeB': node(gpu_state()), 'nodeC': node(gpu_state())})
    # A tuning variable of NCCL's documentation has its own root, with what it does (rules/_nccl_settings.py):
    # the specific root wins, the differential is not made.
    root = by['COLLECTIVE_NCCL_TUNING@nodeB']
    assert root['evidence']['variables'][variable]['value'] == value and root['evidence']['variables'][variable]['differs']
    assert '%s=%s' % (variable, value) in root['cause'] and 'its peers: not set' in root['cause']
    assert root['severity'] == 'error' and root['explained_by'] is None
    assert by['COLLECTIVE_NODE_SLOW@nodeB']['explained_by'] == root['id']
    assert 'NODE_DIFFERS_FROM_PEERS@nodeB' not in by
    # The guess is gone: the symptom says only what NCCL's log shows.
    assert 'clocks differ' not in by['COLLECTIVE_NODE_SLOW@nodeB']['cause']
    assert not [f for f in found if f['host'] in ('nodeA', 'nodeC') and f['code'] != 'GDR_NO_RDMA_NIC']


def test_a_difference_outside_the_rule_list_is_named_by_the_differential():
    # A slow run that no rule explains (NCCL's log of a run beside another process, that process not recorded)
    # on a node whose driver differs from its peers': the differential names the driver, once per fact.
    by, found = run({'nodeA': result('nccl_healthy.txt'), 'nodeB': result('nccl_busy.txt'), 'nodeC': result('nccl_healthy.txt')},
                    {'nodeA': node(gpu_state()), 'nodeB': node(gpu_state(driver='575.57.08')), 'nodeC': node(gpu_state())})
    root = by['NODE_DIFFERS_FROM_PEERS@nodeB']
    assert [d['mine'] for d in root['evidence']['differences'] if 'driver' in d['label']][:1] == ['575.57.08']
    assert '575.57.08 here, 580.159.04 on its peers' in root['cause'] and root['cause'].count('575.57.08') == 1
    assert by['COLLECTIVE_NODE_SLOW@nodeB']['explained_by'] == root['id']
    assert not [f for f in found if f['host'] in ('nodeA', 'nodeC') and f['code'] != 'GDR_NO_RDMA_NIC']


def test_a_process_on_a_gpu_is_named_on_its_gpu():
    by, _found = run({'nodeA': result('nccl_healthy.txt'), 'nodeB': result('nccl_busy.txt')},
                     {'nodeA': node(gpu_state()), 'nodeB': node(gpu_state(processes=['python3']))})
    # The GPUs' own state names the process (rules/_gpu.py GPU_BUSY): the specific root, not the differential.
    busy = [f for f in by.values() if f['code'] == 'GPU_BUSY' and f['host'] == 'nodeB']
    assert busy and 'python3' in busy[0]['cause'] and busy[0]['explained_by'] is None
    assert by['COLLECTIVE_NODE_SLOW@nodeB']['explained_by'] == busy[0]['id']
    assert 'NODE_DIFFERS_FROM_PEERS@nodeB' not in by


def test_differences_are_ranked_by_cost():
    mine = _profile.profile(node(gpu_state(processes=['python3'], driver='570.124.06'), kernel='6.8.0'),
                            {'env': {'NCCL_DEBUG': 'INFO', 'NCCL_FOO_UNKNOWN': '3'}})
    peers = [_profile.profile(node(gpu_state()), {'env': {}}) for _peer in range(3)]
    found, missing = _profile.differences(mine, peers)
    assert [(d['key'], d['cost']) for d in found] == [
        ('gpu/GPU1/processes', 'high'), ('gpu/-/driver', 'medium'), ('host/-/kernel', 'medium'),
        ('run/-/NCCL_FOO_UNKNOWN', 'medium'), ('run/-/NCCL_DEBUG', 'low')]
    assert 'not one of the tuning variables' in found[3]['label'] and missing == {
        'conf': 'not read on this node: not recorded in this run', 'ib': 'not read on this node: not recorded in this run'}


def test_a_peer_majority_decides_and_no_majority_names_nothing_it_holds():
    mine = {'values': {'host/-/kernel': 'a'}, 'not_read': {}}
    two = [{'values': {'host/-/kernel': v}, 'not_read': {}} for v in ('a', 'b')]
    assert _profile.differences(mine, two, ('host',))[0] == []
    three = [{'values': {'host/-/kernel': v}, 'not_read': {}} for v in ('b', 'b', 'a')]
    assert [d['theirs'] for d in _profile.differences(mine, three, ('host',))[0]] == ['b']


def test_nothing_differs_gives_no_root_and_says_what_was_not_read():
    # The busy log, with the GPUs' state not read on the node: the process cannot be seen, so none is named.
    by, found = run({'nodeA': result('nccl_healthy.txt'), 'nodeB': result('nccl_busy.txt')}, {'nodeA': node(), 'nodeB': node()})
    assert not [f for f in found if f['code'] == 'NODE_DIFFERS_FROM_PEERS']
    cause = by['COLLECTIVE_NODE_SLOW@nodeB']['cause']
    assert by['COLLECTIVE_NODE_SLOW@nodeB']['explained_by'] is None
    assert 'nothing recorded differs from nodeA; not compared: ' in cause and 'gpu_state_facts' in cause and 'nccl_facts' in cause


def test_a_specific_root_wins_and_the_differential_does_not_run():
    env_b = {'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1', 'NCCL_NVLS_ENABLE': '0'}
    by, found = run({'nodeA': result('nodeA.txt', {'NCCL_NVLS_ENABLE': '0'}, SPLIT), 'nodeB': result('nodeB.txt', env_b, SPLIT)},
                    {'nodeA': node(), 'nodeB': node()})
    assert by['COLLECTIVE_NODE_SLOW@nodeB']['explained_by'] == 'COLLECTIVE_GPUS_NOT_P2P@nodeB/all_reduce_perf'
    assert not [f for f in found if f['code'] == 'NODE_DIFFERS_FROM_PEERS']


def test_a_fallback_root_never_wins_over_another():
    slow = F.finding(F.COLLECTIVE_NODE_SLOW, 'n', 'x', {}, 'slow', path=[('node', 'n'), ('gpus', 'n')])
    other = F.finding(F.COLLECTIVE_GPUS_NOT_P2P, 'n', 'x', {'variables': {}}, 'p2p', at=[('gpus', 'n')])
    fallback = F.finding(F.NODE_DIFFERS_FROM_PEERS, 'n', 'node', {}, 'differs', at=[('gpus', 'n')], first='x')
    _diagnose.link_causes([fallback, slow, other])
    assert slow['explained_by'] == other['id']


def baseline_report(runs, nodes, generated='2026-11-27T10:00:00'):
    """A report.json of an earlier run, as the report stage writes it (hosts.<node>.profile)."""
    local = _collective.judge_nodes(runs)
    collective = {'nodes': local}
    findings = _diagnose.diagnose(nodes, collective=collective)
    profiles = dict((h, _profile.profile(n, local['hosts'].get(h))) for h, n in nodes.items())
    report = _report.build(nodes, findings, None, collective, None, generated, None, None, profiles)
    return json.loads(json.dumps(report))


def test_a_lone_node_is_compared_with_its_own_healthy_baseline():
    baseline = baseline_report({'solo': result('nccl_healthy.txt')}, {'solo': node(gpu_state())})
    assert baseline['hosts']['solo']['profile']['values']['run/-/NCCL_NVLS_ENABLE'] == '0'
    by, _found = run({'solo': result('nccl_maxnch1.txt')}, {'solo': node(gpu_state())}, baseline=baseline)
    slow = by['COLLECTIVE_NODE_SLOW@solo']
    assert slow['evidence']['basis'] == 'baseline' and slow['evidence']['baseline_ratio'] < 0.1
    assert 'of its own run in the baseline report' in slow['cause']
    # Its tuning variable against the same variable in its own baseline run (rules/_nccl_settings.py).
    root = by['COLLECTIVE_NCCL_TUNING@solo']
    assert slow['explained_by'] == root['id'] and root['evidence']['baseline_gbs'] > 300
    assert 'NCCL_MAX_NCHANNELS=1' in root['cause'] and 'its baseline run: not set' in root['cause']
    assert 'in its own run of the baseline report' in root['cause'] and 'None' not in root['cause']
    # A difference outside NCCL's tuning variables: the differential, against the baseline's profile.
    by, _found = run({'solo': result('nccl_busy.txt')}, {'solo': node(gpu_state(driver='575.57.08'))}, baseline=baseline)
    root = by['NODE_DIFFERS_FROM_PEERS@solo']
    assert by['COLLECTIVE_NODE_SLOW@solo']['explained_by'] == root['id']
    assert root['evidence']['compared_with'] == {'baseline': '2026-11-27T10:00:00'} and 'its baseline' in root['cause']
    # The same run against itself: nothing slow, nothing refused.
    by, found = run({'solo': result('nccl_healthy.txt')}, {'solo': node(gpu_state())}, baseline=baseline)
    assert not [f for f in found if f['code'] in ('COLLECTIVE_NODE_SLOW', 'BASELINE_NOT_USED', 'NODE_DIFFERS_FROM_PEERS')]


def test_an_unhealthy_baseline_is_refused_with_its_reason():
    baseline = baseline_report({'solo': result('nccl_maxnch1.txt')}, {'solo': node()})
    baseline['collective']['nodes']['hosts']['solo']['verdict']['status'] = 'low'
    by, found = run({'solo': result('nccl_maxnch1.txt')}, {'solo': node()}, baseline=baseline)
    refused = by['BASELINE_NOT_USED@solo']
    assert 'the baseline run of solo was not healthy: its own run there was low' in refused['cause']
    assert not [f for f in found if f['code'] in ('COLLECTIVE_NODE_SLOW', 'NODE_DIFFERS_FROM_PEERS')]
    # Another host's report is never used: matched by inventory name.
    by, _found = run({'other': result('nccl_maxnch1.txt')}, {'other': node()}, baseline=baseline_report(
        {'solo': result('nccl_healthy.txt')}, {'solo': node()}))
    assert 'holds no report of other' in by['BASELINE_NOT_USED@other']['cause']


@pytest.mark.parametrize('content', [b'{"schema": ', b'\xff\xfe garbage', b'[' * 100000, b'[1, 2]'])
def test_a_garbled_baseline_is_a_clear_error_in_the_report(tmp_path, content):
    path = tmp_path / 'report.json'
    path.write_bytes(content)
    with pytest.raises(ValueError) as caught:
        _report_stage.read_baseline(str(path))
    by, found = run({'solo': result('nccl_maxnch1.txt')}, {'solo': node()}, baseline={'error': str(caught.value)})
    assert str(path) in by['BASELINE_NOT_USED@fleet']['cause'] and by['BASELINE_NOT_USED@fleet']['severity'] == 'warning'
    assert not [f for f in found if f['code'] == 'NODE_DIFFERS_FROM_PEERS']


def test_a_hostile_baseline_profile_is_bounded_or_ignored():
    baseline = baseline_report({'solo': result('nccl_healthy.txt')}, {'solo': node()})
    hostile = copy.deepcopy(baseline)
    hostile['hosts']['solo']['profile'] = {'values': ['not', 'a', 'mapping'], 'not_read': {}}
    by, found = run({'solo': result('nccl_busy.txt')}, {'solo': node()}, baseline=hostile)
    assert 'no healthy peer or usable baseline' in by['COLLECTIVE_NODE_SLOW@solo']['cause']
    assert not [f for f in found if f['code'] == 'NODE_DIFFERS_FROM_PEERS']
    for busbw in (float('nan'), float('inf'), True, '300', -1):
        bad = copy.deepcopy(baseline)
        bad['collective']['nodes']['hosts']['solo']['busbw_gbs'] = busbw
        by, found = run({'solo': result('nccl_maxnch1.txt')}, {'solo': node()}, baseline=json.loads(json.dumps(bad)))
        assert 'its run there measured no busbw' in by['BASELINE_NOT_USED@solo']['cause'], busbw
        assert not [f for f in found if f['code'] == 'COLLECTIVE_NODE_SLOW']
    many = dict(('host/-/k%d' % i, 'x' * 10000) for i in range(10000))
    read = _profile.from_report({'values': many, 'not_read': {}})
    assert len(read['values']) == _profile.KEYS_MAX and max(len(v) for v in read['values'].values()) == _profile.VALUE_MAX


def test_a_device_of_the_pairwise_benchmark_is_compared_on_its_own_facts():
    nodes = dict((host, node()) for host in ('a', 'b', 'c'))
    for host, facts in nodes.items():
        facts['ib'] = {'devices': [{'name': name, 'fw_ver': '28.41.1000', 'hca_type': 'MT4129', 'ports': [{'port': 1, 'rate_gbps': 400.0}]}
                                   for name in ('mlx5_0', 'mlx5_1')]}
    nodes['a']['ib']['devices'][1]['fw_ver'] = '28.39.1002'
    nodes['a']['ib']['devices'][0]['hca_type'] = 'MT4129-other'   # another HCA of the node: not on the device's path
    device = F.finding(F.BENCH_DEVICE_UNEXPLAINED, 'a', 'mlx5_1', {}, 'mlx5_1 of a is slow', at=[('hca', 'a', 'mlx5_1')],
                       path=[('hca', 'a', 'mlx5_1')], device='mlx5_1')
    fleet = Fleet(nodes, nodes, {})
    made = _differential.differential(fleet, [device])
    assert [(f['id'], f['at']) for f in made] == [('NODE_DIFFERS_FROM_PEERS@a/mlx5_1', [['hca', 'a', 'mlx5_1']])]
    assert [d['key'] for d in made[0]['evidence']['differences']] == ['ib/mlx5_1/fw_ver']
    assert 'firmware of mlx5_1: 28.39.1002 here, 28.41.1000 on its peers' in made[0]['cause']


def test_the_worst_culprit_explains_the_fleet_symptom():
    search = {'culprits': ['a', 'b'], 'cleared': ['c', 'd'], 'basis': {},
              'runs': [{'group': ['a'], 'hosts': ['a', 'c'], 'status': 'warning', 'ratio': 0.7},
                       {'group': ['b'], 'hosts': ['b', 'c'], 'status': 'low', 'ratio': 0.2}]}
    fleet = {'hosts': ['a', 'b', 'c', 'd'], 'benchmark': 'all_reduce_perf', 'transport': {},
             'verdict': {'status': 'low', 'reasons': ['busbw 20 % of expected'], 'ratio': 0.2}}
    nodes = dict((h, {'ib': None, 'gdr': {'kernel': {'release': '6.18.0'}}}) for h in 'abcd')
    found = dict((f['id'], f) for f in _diagnose.diagnose(nodes, collective={'fleet': fleet, 'search': search}))
    assert found['COLLECTIVE_BUSBW_LOW@fleet/all_reduce_perf']['explained_by'] == 'COLLECTIVE_CULPRIT@b/node'
    # In the other order of the runs the same culprit: the ratio decides, not the order.
    search['runs'].reverse()
    search['culprits'].reverse()
    found = dict((f['id'], f) for f in _diagnose.diagnose(nodes, collective={'fleet': fleet, 'search': search}))
    assert found['COLLECTIVE_BUSBW_LOW@fleet/all_reduce_perf']['explained_by'] == 'COLLECTIVE_CULPRIT@b/node'


def test_the_report_records_each_hosts_profile():
    baseline = baseline_report({'solo': result('nccl_healthy.txt')}, {'solo': node(gpu_state())})
    profile = baseline['hosts']['solo']['profile']
    assert profile['values']['gpu/GPU1/processes'] == 'none' and profile['values']['run/-/nccl_version'] == '2.28.9+cuda13.0'
    assert profile['not_read'] == {'conf': 'not recorded in this run', 'ib': 'not recorded in this run'}


def test_a_nodes_collective_comparison_never_explains_a_pairwise_device():
    """The node's NCCL settings differ (its collective's root); its slow HCA has the peers' facts: the device is not
    pinned on the NCCL settings, which perftest never read, and says that nothing recorded differs on it."""
    nodes = dict((host, node()) for host in ('a', 'b', 'c'))
    for facts in nodes.values():
        facts['ib'] = {'devices': [{'name': 'mlx5_0', 'fw_ver': '28.41.1000', 'hca_type': 'MT4129', 'ports': [{'port': 1, 'rate_gbps': 400.0}]}]}
    local = _collective.judge_nodes({'a': result('nccl_maxnch1.txt'), 'b': result('nccl_healthy.txt'), 'c': result('nccl_healthy.txt')})
    slow = [f for f in _diagnose.local_collective_findings(local) if f['code'] == 'COLLECTIVE_NODE_SLOW']
    device = F.finding(F.BENCH_DEVICE_UNEXPLAINED, 'a', 'mlx5_0', {}, 'mlx5_0 of a is slow', at=[('hca', 'a', 'mlx5_0')],
                       path=[('hca', 'a', 'mlx5_0')], device='mlx5_0')
    made = _differential.differential(Fleet(nodes, nodes, {}, collective={'nodes': local}), slow + [device])
    assert [f['id'] for f in made] == ['NODE_DIFFERS_FROM_PEERS@a/collective']
    _diagnose.link_causes(made + slow + [device])
    assert slow[0]['explained_by'] == made[0]['id'] and device['explained_by'] is None
    assert device['cause'].startswith('mlx5_0 of a is slow; nothing recorded differs from its peers; ')
