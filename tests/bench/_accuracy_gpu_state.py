# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Accuracy of the GPU state findings (rules/_gpu.py) on the simulator: each fault of the GPU state
(tests/sim/faults.py gpu_*) on its own GPU of one node of nvidia_h100_8x_ndr beside PEERS healthy
nodes, the facts read through the nvidia-smi stand-in (tests/sim/tools_gpu.py); the node's own
collective (launcher local) slower than its peers' where the fault slows it, with the idle gate's
processes as role fabric_collective records them.

Right: the fault's code is a root on the fault's own GPU (('gpu', 'node', GPUn)). Misattributed:
the node's slow run explained by anything but that root, or left unexplained. False positives:
a GPU finding above info on a healthy peer, on the healthy fleet, or on the traps - a monitoring
agent (DCGM's nv-hostengine) holding 310 MiB on every GPU of every node, a software power cap on
every GPU, an application's own XID 13. Goal: every case right, 0 false positives, 0 misattributed.

    python -m tests.bench._accuracy_gpu_state     # the JSON result on stdout
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile

from ansible_collections.hpc.gpu_fabric.plugins.filter import collective as collective_filter
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.sim import node_facts, render

PROFILE = 'nvidia_h100_8x_ndr'
PEERS = 2
# fault -> (the code it must be named by, the GPU index it goes on, does it slow the node's own run?)
CASES = {
    'gpu_busy': ('GPU_BUSY', 1, True),
    'gpu_throttled': ('GPU_CLOCKS_THROTTLED', 2, True),
    'gpu_nvlink_down': ('GPU_NVLINK_DOWN', 3, True),
    'gpu_xid79': ('GPU_XID', 4, True),
    'gpu_remap_pending': ('GPU_MEMORY_REMAP_PENDING', 5, False),
}
_GPU_STATE_TRAPS = {
    'dcgm_agent_everywhere': lambda bdfs: {'processes': [
        {'bdf': bdf, 'pid': 900 + n, 'name': 'nv-hostengine', 'used_mib': 310, 'uid': 998} for n, bdf in enumerate(bdfs)]},
    'sw_power_cap_everywhere': lambda bdfs: {'clock_reasons': dict((bdf, ['sw_power_cap']) for bdf in bdfs)},
    'application_xid13': lambda bdfs: {'xid': [{'bdf': bdfs[0], 'xid': 13, 'text': "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception"}]},
}
HEALTHY_GBS, SLOW_GBS = 330.2, 149.5   # the split H200 host: a node with matrix products on one GPU


def _gpus():
    return sorted(dev['bdf'] for dev in render.load_profile(PROFILE)['pci'] if dev.get('kind') == 'gpu')


def _facts(faults=(), targets=None, gpu_state=None):
    with tempfile.TemporaryDirectory(prefix='gf-acc-gpu-') as root:
        return node_facts.read(root, PROFILE, faults, changes={'gpu_state': gpu_state} if gpu_state else None, targets=targets, gpu=True)


def _collective(nodes, slow_host=None):
    """The nodes' own runs as role fabric_collective records them: each with its idle gate's processes."""
    hostvars = {}
    for host, facts in nodes.items():
        busbw = SLOW_GBS if host == slow_host else HEALTHY_GBS
        gate = {'gpu_fabric_gpu': {'processes': facts['gpu']['processes'], 'not_read': {}, 'monitoring_agents': []}}
        hostvars[host] = {'__fabric_collective_local': {
            'status': 'ok', 'benchmark': 'all_reduce_perf', 'max_busbw_gbs': busbw, 'avg_busbw_gbs': busbw, 'ranks': list(range(8)),
            'env': {}, 'verdict': {'status': 'unknown', 'reasons': []}}, '__fabric_collective_gpu_gate': gate}
    return {'nodes': collective_filter.collective_local_verdict(hostvars, sorted(nodes))}


def _above_info(found, hosts):
    return sorted('%s@%s' % (f['code'], f['host']) for f in found
                  if f['code'].startswith('GPU_') and f['severity'] != 'info' and f['host'] in hosts)


def _case(fault, healthy, bdfs):
    code, index, slows = CASES[fault]
    bdf = bdfs[index]
    nodes = dict(('peer%d' % n, copy.deepcopy(healthy)) for n in range(1, PEERS + 1))
    nodes['node'] = _facts((fault,), [bdf])
    name = next(g['name'] for g in nodes['node']['gdr']['gpus'] if g['pci_address'] == bdf)
    found = _diagnose.diagnose(nodes, collective=_collective(nodes, 'node' if slows else None))
    roots = [f for f in found if f['code'] == code and f['host'] == 'node' and f['explained_by'] is None]
    right = any(['gpu', 'node', name] in (f['at'] or []) for f in roots)
    wrong_gpu = [f['id'] for f in found if f['code'].startswith('GPU_') and f['host'] == 'node' and f['severity'] != 'info'
                 and ['gpu', 'node', name] not in (f['at'] or [])]
    slow = [f for f in found if f['code'] == 'COLLECTIVE_NODE_SLOW']
    root_ids = set(f['id'] for f in roots)
    misattributed = [f['id'] for f in slow if f['host'] != 'node' or f['explained_by'] not in root_ids]
    return {'fault': fault, 'gpu': name, 'right': right and not wrong_gpu, 'roots': sorted(f['id'] for f in roots),
            'other_gpu_findings': wrong_gpu, 'misattributed': misattributed,
            'false_positives': _above_info(found, ['peer%d' % n for n in range(1, PEERS + 1)])}


def run():
    """{'right', 'total', 'false_positives', 'misattributed', 'cases', 'traps'}."""
    bdfs = _gpus()
    healthy = _facts()
    cases = [_case(fault, healthy, bdfs) for fault in sorted(CASES)]
    traps = {}
    fleet = dict(('n%d' % n, copy.deepcopy(healthy)) for n in range(PEERS + 1))
    traps['healthy_fleet'] = _above_info(_diagnose.diagnose(fleet, collective=_collective(fleet)), list(fleet))
    for name, state in sorted(_GPU_STATE_TRAPS.items()):
        facts = _facts(gpu_state=state(bdfs))
        fleet = dict(('n%d' % n, copy.deepcopy(facts)) for n in range(PEERS + 1))
        traps[name] = _above_info(_diagnose.diagnose(fleet, collective=_collective(fleet)), list(fleet))
    false_positives = sum(len(c['false_positives']) for c in cases) + sum(len(v) for v in traps.values())
    return {'right': sum(1 for c in cases if c['right']), 'total': len(cases), 'false_positives': false_positives,
            'misattributed': sum(len(c['misattributed']) for c in cases), 'cases': cases, 'traps': traps}


if __name__ == '__main__':
    json.dump(run(), sys.stdout, indent=1)
    sys.stdout.write('\n')
