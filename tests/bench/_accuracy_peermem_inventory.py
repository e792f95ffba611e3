# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Accuracy of the peer-memory build, RDMA-function and expected-inventory rules on the simulator
(plugin_utils/diagnosis/_inventory.py, rules/_node.py peer_build_findings): each class planted on its own
node (or on every node alike, where the fleet comparison sees nothing), named as a root on that node;
the symptoms it causes explained by it (``misattributed`` counts those that are not); and, goal 0,
findings of these codes above info on healthy-but-unusual nodes (``false_positives``).

    python -m tests.bench._accuracy_peermem_inventory      # the JSON result on stdout (diagnosis_accuracy main adds it too)
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.sim import node_facts as _node_facts

CODES = ('GDR_PEERMEM_DRIVER_MISMATCH', 'RDMA_DEVICE_UNBOUND', 'INVENTORY_EXPECTED_MISMATCH', 'INVENTORY_GPU_WITHOUT_RAIL')
BASE = 'nvidia_h100_8x_ndr'
# What the user expects of the base profile: 8 GPUs, 8 NDR compute rails, the BlueField-3 card (management: its
# netdev carries the default route, module_utils/_rails.py).
EXPECTED = {'gpus': 8, 'hcas': {'compute': {'count': 8, 'rate_gbps': 400}, 'management': {'count': 1}}}
# Every second compute HCA absent: a pair of GPUs under each NIC's PCIe switch (DGX-1's design, an even share).
PAIRED = (('hca_missing',) * 4, ['mlx5_1', 'mlx5_3', 'mlx5_5', 'mlx5_7'])
_CACHE = {}


def facts(profile, faults=(), targets=None):
    key = (profile, tuple(faults), tuple(targets or ()))
    if key not in _CACHE:
        with tempfile.TemporaryDirectory(prefix='gf-acc14-') as root:
            _CACHE[key] = _node_facts.read(root, profile, tuple(faults), targets=targets)
    return copy.deepcopy(_CACHE[key])


def _fleet(node, peers, expected=None):
    nodes = {'node': node}
    nodes.update(('peer%d' % index, peer) for index, peer in enumerate(peers, 1))
    if expected is not None:
        for value in nodes.values():
            value['expected'] = copy.deepcopy(expected)
    return nodes


def _judge(name, nodes, want, on):
    """One case: ``want`` a root (explained_by null) on each host of ``on``; every other finding of
    CODES above info on a host outside ``on`` is misattributed, and so is a symptom on ``on`` explained
    by something else than a root of ``want`` where a root of ``want`` is there."""
    found = _diagnose.diagnose(nodes)
    by_id = dict((f['id'], f) for f in found)
    roots = dict((host, [f for f in found if f['host'] == host and f['code'] == want and f['explained_by'] is None]) for host in on)
    right = all(roots.values())
    wrong = [f['id'] for f in found if f['code'] in CODES and f['severity'] != 'info' and f['host'] not in on]
    for f in found:
        cause = by_id.get(f['explained_by'] or '')
        if f['host'] in on and f['code'] in ('FLEET_HW_MISSING', 'GDR_NO_RDMA_NIC', 'INVENTORY_GPU_WITHOUT_RAIL',
                                             'GDR_PEERMEM_NOT_LOADED') and roots[f['host']] and cause is not None \
                and cause['code'] != want:
            wrong.append(f['id'])
    return {'case': name, 'right': right, 'misattributed': wrong,
            'roots': sorted(set('%s@%s' % (f['code'], f['host']) for f in found if f['explained_by'] is None and f['severity'] != 'info'))}


def cases():
    healthy = facts(BASE)
    mismatch = facts(BASE, ('peermem_driver_mismatch',))
    unbound = facts(BASE, ('rdma_unbound',))
    fewer = facts(BASE, ('gpus_outnumber_rails',))
    return [
        _judge('peermem_driver_mismatch', _fleet(mismatch, [copy.deepcopy(healthy), copy.deepcopy(healthy)]),
               'GDR_PEERMEM_DRIVER_MISMATCH', ['node']),
        _judge('rdma_unbound', _fleet(unbound, [copy.deepcopy(healthy), copy.deepcopy(healthy)]), 'RDMA_DEVICE_UNBOUND', ['node']),
        _judge('rdma_unbound_everywhere', _fleet(unbound, [copy.deepcopy(unbound), copy.deepcopy(unbound)]),
               'RDMA_DEVICE_UNBOUND', ['node', 'peer1', 'peer2']),
        _judge('gpus_outnumber_rails_everywhere', _fleet(fewer, [copy.deepcopy(fewer), copy.deepcopy(fewer)]),
               'INVENTORY_GPU_WITHOUT_RAIL', ['node', 'peer1', 'peer2']),
        _judge('expected_compute_count', _fleet(fewer, [copy.deepcopy(fewer), copy.deepcopy(fewer)], EXPECTED),
               'INVENTORY_EXPECTED_MISMATCH', ['node', 'peer1', 'peer2']),
        # Given with -e as a JSON string: read as the mapping.
        _judge('expected_as_json_string', _fleet(facts('nvidia_h200_8x_ndr'), [healthy], json.dumps({'gpus': 4})),
               'INVENTORY_EXPECTED_MISMATCH', ['node', 'peer1']),
    ]


def traps():
    """{trap: [findings of CODES above info]} on healthy-but-unusual nodes (goal: none)."""
    paired = facts(BASE, *PAIRED)
    healthy = facts(BASE)
    fleets = {
        'unusual_%s' % name: {'node': facts(name)}
        for name in ('nvidia_h100_8x_ndr_storage', 'nvidia_h100_8x_ndr_12hca', 'nvidia_h200_8x_ndr', 'amd_mi300x_roce_mgmt',
                     'metax_c500_cx7', 'homelab_cx4', 'h200x2_no_rdma', 'no_rdma_vm')}
    fleets['gpu_pairs_share_rails_everywhere'] = _fleet(paired, [copy.deepcopy(paired), copy.deepcopy(paired)])
    fleets['gpu_pairs_share_rails_expected'] = _fleet(paired, [copy.deepcopy(paired)],
                                                      {'gpus': 8, 'gpus_per_rail': 2, 'hcas': {'compute': {'count': 4}}})
    fleets['healthy_with_expected'] = _fleet(healthy, [copy.deepcopy(healthy)], EXPECTED)
    fleets['healthy_expected_json'] = _fleet(healthy, [copy.deepcopy(healthy)], json.dumps(EXPECTED))
    nv_peer_mem = facts(BASE)
    nv_peer_mem['gdr']['peer_memory_build'] = [dict(nv_peer_mem['gdr']['peer_memory_build'][0], module='nv_peer_mem',
                                                    loaded_version='1.3-0', state='unknown', why='nv_peer_mem carries its own version')]
    fleets['nv_peer_mem'] = {'node': nv_peer_mem}
    result = {}
    for name, nodes in sorted(fleets.items()):
        result[name] = sorted('%s@%s' % (f['code'], f['host']) for f in _diagnose.diagnose(nodes)
                              if f['code'] in CODES and f['severity'] != 'info')
    return result


def run():
    """{'right', 'total', 'false_positives', 'misattributed', 'cases', 'traps'}."""
    checked = cases()
    found = traps()
    return {'right': sum(1 for c in checked if c['right']), 'total': len(checked),
            'false_positives': sum(len(v) for v in found.values()),
            'misattributed': sum(len(c['misattributed']) for c in checked), 'cases': checked, 'traps': found}


if __name__ == '__main__':
    print(json.dumps(run(), indent=1))
    sys.exit(0)
