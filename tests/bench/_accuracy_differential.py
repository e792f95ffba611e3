# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Accuracy of the differential diagnosis (plugins/plugin_utils/diagnosis/rules/_differential.py): slow nodes
whose cause no rule names, planted through facts the profile covers (a driver, a GPU clock setting, an NCCL
variable this project does not know, a kernel, an NCCL configuration file, a process on a GPU), each beside
healthy peers of the simulator's H100 profile; a lone node against its baseline; a fleet symptom with two
culprits; a slow node where nothing recorded differs; and fleets of healthy-but-unusual nodes (a monitoring
agent on every GPU, a tuning variable set on every node, one node with another kernel and VBIOS) where nothing
may be named.

A case is right when the node's slow symptom points at a root on the planted node that names the planted key:
NODE_DIFFERS_FROM_PEERS with the key first, or - where a rule knows the cause (an NCCL tuning variable, a process
on a GPU) - that rule's root, which wins over the differential (``misattributed`` counts a slow symptom explained
by nothing or by a root on another node, ``false_positives`` a NODE_DIFFERS_FROM_PEERS anywhere else).

    python -m tests.bench._accuracy_differential      # the JSON result on stdout
"""

from __future__ import annotations

import copy
import json
import sys

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _profile
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report

PROFILE = 'nvidia_h100_8x_ndr'
PEERS = ('peer1', 'peer2', 'peer3')
HEALTHY_GBS = 480.0
SLOW_GBS = 190.0
_FACTS = {}


def _sim_node():
    if PROFILE not in _FACTS:
        from tests.bench import diagnosis_accuracy   # renders the profile's snapshot once
        _FACTS[PROFILE] = diagnosis_accuracy.node_facts(PROFILE)
    return copy.deepcopy(_FACTS[PROFILE])


def _gpu_state(gdr, processes=None):
    """gpu_fabric_gpu (the shared contract of gpu_state_facts) of the node's GPUs, idle and healthy."""
    gpus = [{'bdf': gpu['pci_address'], 'index': index, 'name': 'NVIDIA H100 80GB HBM3', 'vbios': '96.00.74.00.01',
             'power_limit_w': 700.0, 'sm_clock_max_mhz': 1980, 'mem_clock_max_mhz': 2619, 'clock_reasons': ['gpu_idle'],
             'pcie_width': 16, 'nvlink': {'links': 18, 'active': 18, 'inactive': [], 'speed_gbs': 26.562, 'errors': {}}}
            for index, gpu in enumerate(gdr.get('gpus') or [])]
    return {'tool': 'nvidia-smi', 'driver_version': '580.159.04', 'gpus': gpus, 'xid': [], 'not_read': {},
            'processes': [dict(p) for p in processes or []]}


def _nccl_conf(settings=None):
    """gpu_fabric_nccl (nccl_facts): no file but what ``settings`` puts in /etc/nccl.conf."""
    settings = settings or {}
    return {'files': [{'path': '/etc/nccl.conf', 'source': 'etc', 'state': 'read' if settings else 'absent', 'settings': settings}],
            'settings': dict((name, {'value': value, 'source': '/etc/nccl.conf'}) for name, value in settings.items()),
            'library': {'version': '2.28.9', 'path': '/usr/lib/x86_64-linux-gnu/libnccl.so.2'}, 'header': None, 'not_read': {}}


def _node(processes=None):
    facts = _sim_node()
    facts['gpu'] = _gpu_state(facts['gdr'], processes)
    facts['nccl'] = _nccl_conf()
    return facts


def _run(host, gbs, env=None, nvlink_gbs=None):
    """A node's collective_bench result (launcher local) as judge_nodes takes it; ``nvlink_gbs``: NCCL's totalBw of
    its GPUs (the run's verdict is then against it)."""
    topology = {host: {'total_bw_gbs': nvlink_gbs, 'max_bw_gbs': nvlink_gbs, 'links': ['NVL'], 'nvlink_gbs': 20.6}} if nvlink_gbs else {}
    return {'status': 'ok', 'failure': None, 'benchmark': 'all_reduce_perf', 'max_busbw_gbs': gbs, 'avg_busbw_gbs': gbs,
            'ranks': [{'rank': r, 'host': host} for r in range(8)], 'versions': {'library_version': '2.28.9+cuda13.0'},
            'env': {}, 'verdict': {'status': 'unknown', 'reasons': []}, 'wrong_total': 0,
            'transport': {'env': dict({'NCCL_DEBUG': 'INFO'}, **(env or {})), 'intra_by_host': {host: {'P2P': 56, 'via': ['P2P/CUMEM']}},
                          'topology': topology}}


def _dcgm(gdr):
    return [{'bdf': gpu['pci_address'], 'pid': 900 + i, 'name': 'nv-hostengine', 'used_mib': 300, 'user': 'root'}
            for i, gpu in enumerate(gdr.get('gpus') or [])]


def _plant(name, node, env):
    """Plant one cause on ``node``: returns the key the differential must name first."""
    gpus = node['gpu']['gpus']
    if name == 'driver':
        node['gpu']['driver_version'] = '570.124.06'
        return 'gpu/-/driver'
    if name == 'gpu_clock':
        gpus[3]['clock_reasons'] = ['applications_clocks_setting']   # nvidia-smi -lgc on one GPU
        return 'gpu/GPU3/clock_reasons'
    if name == 'unknown_nccl_variable':
        env['NCCL_EXPERIMENTAL_FOO'] = '1'
        return 'run/-/NCCL_EXPERIMENTAL_FOO'
    if name == 'kernel':
        node['gdr']['kernel']['release'] = '6.8.0-31-generic'
        return 'host/-/kernel'
    if name == 'nccl_conf_file':
        node['nccl'] = _nccl_conf({'NCCL_ALGO': 'Tree'})
        env['NCCL_ALGO'] = 'Tree'    # NCCL logs a setting of /etc/nccl.conf as set by environment
        return ('conf/-/NCCL_ALGO', 'run/-/NCCL_ALGO')   # the file read on the node, and NCCL's log: both name it
    if name == 'gpu_process':
        node['gpu']['processes'].append({'bdf': gpus[5]['bdf'], 'pid': 4242, 'name': 'python3', 'used_mib': 20000, 'user': 'alice'})
        return 'gpu/GPU5/processes'
    raise KeyError(name)


CAUSES = ('driver', 'gpu_clock', 'unknown_nccl_variable', 'kernel', 'nccl_conf_file', 'gpu_process')


def _specific_names(root, keys):
    """Whether a specific root (a rule that knows the cause: rules/_nccl_settings.py, rules/_gpu.py) names the
    planted key: NCCL_<X> in its variables, or a process on the planted GPU."""
    evidence = root.get('evidence') or {}
    for key in keys:
        source, device, attribute = key.split('/', 2)
        if root['code'] == 'COLLECTIVE_NCCL_TUNING' and source in ('run', 'conf') and attribute in (evidence.get('variables') or {}):
            return True
        if root['code'] == 'GPU_BUSY' and attribute == 'processes' and evidence.get('gpu') == device:
            return True
    return False


def _judge(found, host, key):
    """Right: the node's slow symptom points at a root on the node that names the planted key - the
    differential's (its first difference) or, where a rule knows the cause, that rule's root (the specific root
    wins over the differential: rules/_differential.py runs only for what nothing explains)."""
    keys = key if isinstance(key, tuple) else (key,)
    roots = [f for f in found if f['code'] == 'NODE_DIFFERS_FROM_PEERS']
    mine = [f for f in roots if f['host'] == host]
    slow = [f for f in found if f['code'] == 'COLLECTIVE_NODE_SLOW' and f['host'] == host]
    by_id = dict((f['id'], f) for f in found)
    first = mine[0]['evidence']['differences'][0]['key'] if mine else None
    named = [by_id.get(f['explained_by']) for f in slow]
    right = bool(slow) and all(root is not None and root['host'] == host and (
        (root['code'] == 'NODE_DIFFERS_FROM_PEERS' and root['evidence']['differences'][0]['key'] in keys)
        or _specific_names(root, keys)) for root in named)
    return {'right': int(right), 'total': 1, 'false_positives': len(roots) - len(mine),
            'misattributed': len([root for root in named if root is None or root['host'] != host]),
            'named': first or (named[0]['id'] if named and named[0] else None)}


def _fleet(planted=None, dcgm=False, env_all=None):
    nodes, runs = {}, {}
    for host in ('node',) + PEERS:
        node = _node()
        if dcgm:
            node['gpu']['processes'] = _dcgm(node['gdr'])
        env = dict(env_all or {})
        key = _plant(planted, node, env) if planted and host == 'node' else None
        nodes[host] = node
        runs[host] = _run(host, SLOW_GBS if key else HEALTHY_GBS, env)
        if key:
            nodes['__key'] = key
    key = nodes.pop('__key', None)
    return nodes, {'nodes': _collective.judge_nodes(runs)}, key


def planted_run():
    results = {}
    for name in CAUSES:
        nodes, collective, key = _fleet(name, dcgm=name == 'gpu_process')
        results[name] = _judge(_diagnose.diagnose(nodes, collective=collective), 'node', key)
    return results


def baseline_run():
    """A lone node, slow against its own earlier healthy report, with NCCL_PROTO set since."""
    nodes = {'node': _node()}
    before = {'nodes': _collective.judge_nodes({'node': _run('node', HEALTHY_GBS)})}
    profiles = {'node': _profile.profile(nodes['node'], before['nodes']['hosts']['node'])}
    baseline = json.loads(json.dumps(_report.build(nodes, _diagnose.diagnose(nodes, collective=before), None, before, None,
                                                   '2026-11-27T10:00:00', None, None, profiles)))
    now = {'nodes': _collective.judge_nodes({'node': _run('node', SLOW_GBS, {'NCCL_PROTO': 'LL'})})}
    return _judge(_diagnose.diagnose(nodes, collective=now, baseline=baseline), 'node', 'run/-/NCCL_PROTO')


def nothing_differs_run():
    """A slow node whose facts are its peers' and whose GPUs' state was not read anywhere: no root, the sentence."""
    nodes, collective, _key = _fleet()
    for node in nodes.values():
        node['gpu'] = {'tool': None, 'gpus': [], 'processes': [], 'xid': [], 'not_read': {'gpus': 'nvidia-smi not found'}}
    collective = {'nodes': _collective.judge_nodes(dict((h, _run(h, SLOW_GBS if h == 'node' else HEALTHY_GBS)) for h in nodes))}
    found = _diagnose.diagnose(nodes, collective=collective)
    slow = [f for f in found if f['code'] == 'COLLECTIVE_NODE_SLOW' and f['host'] == 'node']
    roots = [f for f in found if f['code'] == 'NODE_DIFFERS_FROM_PEERS']
    right = bool(slow) and not roots and all('nothing recorded differs from its peers; not compared:' in f['cause']
                                             and 'nvidia-smi not found' in f['cause'] for f in slow)
    return {'right': int(right), 'total': 1, 'false_positives': len(roots), 'misattributed': 0}


def culprit_run():
    """A fleet run with two culprits: the fleet symptom on the one whose own runs measured the lowest ratio."""
    nodes = dict((host, _node()) for host in ('a', 'b', 'c', 'd'))
    search = {'culprits': ['a', 'b'], 'cleared': ['c', 'd'], 'basis': {},
              'runs': [{'group': ['a'], 'hosts': ['a', 'c'], 'status': 'warning', 'ratio': 0.72},
                       {'group': ['b'], 'hosts': ['b', 'd'], 'status': 'low', 'ratio': 0.21}]}
    fleet = {'hosts': sorted(nodes), 'benchmark': 'all_reduce_perf', 'transport': {},
             'verdict': {'status': 'low', 'reasons': ['busbw 21 % of the expected'], 'ratio': 0.21}}
    found = dict((f['id'], f) for f in _diagnose.diagnose(nodes, collective={'fleet': fleet, 'search': search}))
    by = found['COLLECTIVE_BUSBW_LOW@fleet/all_reduce_perf']['explained_by']
    return {'right': int(by == 'COLLECTIVE_CULPRIT@b/node'), 'total': 1, 'false_positives': 0,
            'misattributed': int(by != 'COLLECTIVE_CULPRIT@b/node'), 'named': by}


def trap_run():
    """Healthy-but-unusual fleets: no slow node, so nothing to name; and a slow node beside DCGM on every GPU and a
    tuning variable set on every node: only what the slow node alone has is named."""
    results = {}
    traps = {'dcgm_everywhere': dict(dcgm=True), 'tuning_everywhere': dict(env_all={'NCCL_IB_QPS_PER_CONNECTION': '4'})}
    for name, kwargs in traps.items():
        nodes, collective, _key = _fleet(**kwargs)
        found = _diagnose.diagnose(nodes, collective=collective)
        results[name] = {'false_positives': len([f for f in found if f['code'] == 'NODE_DIFFERS_FROM_PEERS' or
                                                 (f['code'].startswith('COLLECTIVE_') and f['severity'] != 'info')])}
    nodes, collective, _key = _fleet()
    nodes['peer2']['gdr']['kernel']['release'] = '6.8.0-31-generic'
    for gpu in nodes['peer2']['gpu']['gpus']:
        gpu['vbios'] = '96.00.99.00.01'
    results['one_unusual_node'] = {'false_positives': len([f for f in _diagnose.diagnose(nodes, collective=collective)
                                                           if f['code'] == 'NODE_DIFFERS_FROM_PEERS'])}
    # Every node's run a warning against its NVLink (a ring that does not use every link), one node unusual: no slow node.
    nodes, _collective_run, _key = _fleet()
    nodes['peer1']['gdr']['kernel']['release'] = '6.8.0-31-generic'
    warning = {'nodes': _collective.judge_nodes(dict((h, _run(h, HEALTHY_GBS, nvlink_gbs=740.0)) for h in nodes))}
    found = _diagnose.diagnose(nodes, collective=warning)
    results['all_warning_one_unusual'] = {'false_positives': len([f for f in found if f['code'] == 'NODE_DIFFERS_FROM_PEERS'
                                                                  or (f['code'].startswith('COLLECTIVE_') and f['severity'] == 'error')])}
    nodes, collective, key = _fleet('unknown_nccl_variable', dcgm=True, env_all={'NCCL_IB_QPS_PER_CONNECTION': '4'})
    check = _judge(_diagnose.diagnose(nodes, collective=collective), 'node', key)
    root = [f for f in _diagnose.diagnose(nodes, collective=collective) if f['code'] == 'NODE_DIFFERS_FROM_PEERS']
    named = [d['key'] for f in root for d in f['evidence']['differences']]
    # Only the planted variable: neither the agent on every GPU nor the variable every node sets.
    results['slow_beside_traps'] = dict(check, false_positives=check['false_positives'] + len([k for k in named if k != key]))
    return results


def run():
    """{'right', 'total', 'false_positives', 'misattributed', 'cases': {...}}."""
    cases = dict(planted_run())
    cases['lone_node_baseline'] = baseline_run()
    cases['nothing_differs'] = nothing_differs_run()
    cases['fleet_symptom_worst_culprit'] = culprit_run()
    cases.update(('trap_%s' % name, value) for name, value in trap_run().items())
    total = {'right': 0, 'total': 0, 'false_positives': 0, 'misattributed': 0}
    for value in cases.values():
        for field in total:
            total[field] += value.get(field, 0)
    return dict(total, cases=cases)


if __name__ == '__main__':
    print(json.dumps(run(), indent=1))
    sys.exit(0)
