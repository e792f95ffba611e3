# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Accuracy of the diagnosis on the simulator's fault catalog (issue 6).

Every fault of tests/sim/faults.py injected alone and in pairs on a profile it applies to,
on one node beside PEERS healthy nodes of the same profile (the fleet faults, hca_missing and
fw_mismatch, show only against peers: plugin_utils/_fleet.py); a case counts as right when
every injected fault's expected code is a root finding (explained_by null) on that node.
Also, each with goal 0: findings above info on the fault-free profiles judged alone
(``healthy_findings_above_info``) and as a fleet of PEERS + 1 identical nodes
(``healthy_fleet_findings_above_info``), and findings above info that blame a healthy peer
in the cases (``peer_findings_above_info``), and on the healthy-but-unusual profiles (UNUSUAL)
alone and in fleets (UNUSUAL_FLEETS: ``unusual_findings_above_info``,
``unusual_fleet_findings_above_info``). The facts are read with the modules' readers
from rendered snapshot roots.

Usage: python -m tests.bench.diagnosis_accuracy   (from the checkout, venv active)
"""

from __future__ import annotations

import copy
import itertools
import json
import sys
import tempfile

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _diagnose
from tests.sim import render
from tests.sim import node_facts as _node_facts

# The code each fault must produce, and the profile it is injected on.
EXPECTED = {
    'port_down': ('IB_PORT_DOWN', 'nvidia_h100_8x_ndr'),
    'port_polling': ('IB_PORT_DOWN', 'nvidia_h100_8x_ndr'),
    'rate_degraded_1x': ('IB_RATE_DEGRADED', 'nvidia_h100_8x_ndr'),
    'peermem_not_loaded': ('GDR_PEERMEM_NOT_LOADED', 'nvidia_h100_8x_ndr'),
    'mm_kobj_not_exported': ('GDR_MM_KOBJ_NOT_EXPORTED', 'metax_c500_cx7'),
    'ofed_stale_build': ('GDR_OFED_STALE_BUILD', 'metax_c500_cx7'),
    'acs_enabled': ('GDR_ACS_REDIRECT', 'nvidia_h100_8x_ndr'),
    'cross_numa': ('GPU_NIC_FAR', 'nvidia_h100_8x_ndr'),
    'roce_no_v2_gid': ('ROCE_NO_V2_GID', 'amd_mi300x_roce'),
    'error_counters': ('IB_ERROR_COUNTERS', 'nvidia_h100_8x_ndr'),
    'governor_powersave': ('HOST_CPU_GOVERNOR', 'nvidia_h100_8x_ndr'),
    'memlock_limited': ('HOST_MEMLOCK_LIMITED', 'nvidia_h100_8x_ndr'),
    'modules_not_persistent': ('HOST_MODULES_NOT_PERSISTENT', 'nvidia_h100_8x_ndr'),
    'hca_missing': ('FLEET_HW_MISSING', 'nvidia_h100_8x_ndr'),
    'fw_mismatch': ('FLEET_DIFFERS', 'nvidia_h100_8x_ndr'),
    # RoCE lossless: plugin_utils/_roce_rules.py, _fleet.roce_qos.
    'roce_trust_pcp': ('ROCE_TRUST_PCP', 'amd_mi300x_roce'),
    'roce_pfc_off': ('ROCE_PFC_OFF', 'amd_mi300x_roce'),
    'roce_ecn_off': ('ROCE_ECN_OFF', 'amd_mi300x_roce'),
    'roce_cnp_lossy': ('ROCE_CNP_LOSSY', 'amd_mi300x_roce'),
    'roce_tos_default': ('ROCE_TC_NOT_LOSSLESS', 'amd_mi300x_roce'),
    'roce_pfc_prio4': ('FLEET_DIFFERS', 'amd_mi300x_roce'),
    'roce_mtu_low': ('ROCE_MTU_MISMATCH', 'amd_mi300x_roce'),
    'roce_congestion': ('ROCE_CONGESTION', 'amd_mi300x_roce'),
    # PCIe links and the IOMMU: plugin_utils/_pcie_rules.py.
    'pcie_link_degraded': ('PCIE_LINK_DEGRADED', 'nvidia_h100_8x_ndr'),
    'pcie_bridge_slow': ('PCIE_LINK_DEGRADED', 'nvidia_h100_8x_ndr'),
    'iommu_translated': ('HOST_IOMMU_TRANSLATED', 'nvidia_h100_8x_ndr'),
}
# Healthy nodes of the faulty node's profile beside it: two, so that the peers hold a strict
# majority of three (plugin_utils/_fleet.py MIN_MAJORITY).
PEERS = 2
# Faults on one HCA: the second fault of a pair goes to another HCA (on the same port, a
# port that is down hides its rate and counters, rightly).
ON_HCA = ('cross_numa', 'hca_missing', 'port_down', 'port_polling', 'rate_degraded_1x', 'error_counters', 'roce_no_v2_gid',
          'roce_mtu_low', 'roce_congestion', 'pcie_link_degraded', 'pcie_bridge_slow')
# The later fault undoes the earlier: a stale OFED build needs a kernel that exports mm_kobj.
# A module that is not loaded cannot be loaded-but-not-persistent.
CONTRADICT = {('mm_kobj_not_exported', 'ofed_stale_build'), ('modules_not_persistent', 'peermem_not_loaded'),
              # RoCE QoS faults that set the same node-wide value (PFC, the priority of the lossless class):
              # the later undoes the earlier.
              ('roce_pfc_off', 'roce_pfc_prio4'),
              # Without PFC every ToS lands in a lossy queue: ROCE_PFC_OFF says so, not the ToS.
              ('roce_pfc_off', 'roce_tos_default'),
              # roce_pfc_prio4 sets ECN on its own priority, which undoes roce_ecn_off.
              ('roce_ecn_off', 'roce_pfc_prio4')}
HEALTHY = ('nvidia_h100_8x_ndr', 'metax_c500_cx7', 'amd_mi300x_roce', 'homelab_cx4', 'no_rdma_vm', 'h200x2_no_rdma')
# Healthy but unusual hardware (tests/sim/profiles: an extra storage card, twelve RDMA devices, a
# second GPU model, a RoCE-capable management port), goal: no finding above info, alone and as
# fleets. Each fleet: {host: (profile, NCCL_IB_HCA or None)}; the unusual node beside peers of the
# usual profile (the difference is on one node) and among its own kind.
NCCL_MI300X = '=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1'
UNUSUAL = ('nvidia_h100_8x_ndr_storage', 'nvidia_h100_8x_ndr_12hca', 'nvidia_h200_8x_ndr', 'amd_mi300x_roce_mgmt')
UNUSUAL_FLEETS = {
    'extra_storage_card': {'node': ('nvidia_h100_8x_ndr_storage', None), 'peer1': ('nvidia_h100_8x_ndr', None),
                           'peer2': ('nvidia_h100_8x_ndr', None)},
    'extra_storage_card_kind': dict(('n%d' % i, ('nvidia_h100_8x_ndr_storage', None)) for i in range(3)),
    'twelve_hcas': {'node': ('nvidia_h100_8x_ndr_12hca', None), 'peer1': ('nvidia_h100_8x_ndr', None),
                    'peer2': ('nvidia_h100_8x_ndr', None)},
    'twelve_hcas_with_storage_peers': {'node': ('nvidia_h100_8x_ndr_12hca', None), 'peer1': ('nvidia_h100_8x_ndr_storage', None),
                                       'peer2': ('nvidia_h100_8x_ndr_storage', None)},
    'two_gpu_models': {'h100a': ('nvidia_h100_8x_ndr', None), 'h100b': ('nvidia_h100_8x_ndr', None),
                       'h100c': ('nvidia_h100_8x_ndr', None), 'h200a': ('nvidia_h200_8x_ndr', None),
                       'h200b': ('nvidia_h200_8x_ndr', None)},
    'management_port': {'node': ('amd_mi300x_roce_mgmt', None), 'peer1': ('amd_mi300x_roce', None),
                        'peer2': ('amd_mi300x_roce', None)},
    'management_port_nccl_ib_hca': {'node': ('amd_mi300x_roce_mgmt', NCCL_MI300X), 'peer1': ('amd_mi300x_roce', NCCL_MI300X),
                                    'peer2': ('amd_mi300x_roce', NCCL_MI300X)},
}


def node_facts(profile_name, fault_names=()):
    hcas = [h['name'] for h in render.load_profile(profile_name).get('hcas', []) if h['ports']]
    # Each fault that strikes an HCA takes the next one (two link faults: two HCAs).
    targets, on_hca = [], 0
    for name in fault_names:
        target = None
        if name in ON_HCA:
            target = hcas[on_hca] if on_hca < len(hcas) else None
            on_hca += 1
        targets.append(target)
    # The rendered tree (~3,300 files) is only read once: it goes as soon as the facts are in
    # memory (left behind, a unit-test run leaked ~300,000 inodes into /tmp).
    with tempfile.TemporaryDirectory(prefix='gf-acc-') as root:
        return _node_facts.read(root, profile_name, fault_names, targets=targets)


_HEALTHY_FACTS = {}


def fleet(profile_name, fault_names=()):
    """{'node': the node with the faults, 'peer1'..: healthy nodes of its profile (rendered once).}"""
    if profile_name not in _HEALTHY_FACTS:
        _HEALTHY_FACTS[profile_name] = node_facts(profile_name)
    nodes = dict(('peer%d' % index, copy.deepcopy(_HEALTHY_FACTS[profile_name])) for index in range(1, PEERS + 1))
    nodes['node'] = node_facts(profile_name, fault_names) if fault_names else copy.deepcopy(_HEALTHY_FACTS[profile_name])
    return nodes


def unusual_fleet(spec):
    """{host: facts} of an UNUSUAL_FLEETS entry (each profile rendered once)."""
    nodes = {}
    for host, (profile_name, ib_hca) in spec.items():
        if profile_name not in _HEALTHY_FACTS:
            _HEALTHY_FACTS[profile_name] = node_facts(profile_name)
        nodes[host] = copy.deepcopy(_HEALTHY_FACTS[profile_name])
        if ib_hca:
            nodes[host]['nccl_ib_hca'] = ib_hca
    return nodes


def unusual_run():
    """Findings above info on the healthy-but-unusual profiles alone and in their fleets (goal: none)."""
    alone = dict((name, [f['code'] for f in _diagnose.diagnose({'node': node_facts(name)}) if f['severity'] != 'info'])
                 for name in UNUSUAL)
    fleets = dict((name, sorted(set('%s@%s' % (f['code'], f['host']) for f in _diagnose.diagnose(unusual_fleet(spec))
                                    if f['severity'] != 'info')))
                  for name, spec in sorted(UNUSUAL_FLEETS.items()))
    return alone, fleets


def case(profile_name, fault_names):
    found = _diagnose.diagnose(fleet(profile_name, fault_names))
    roots = set(f['code'] for f in found if f['explained_by'] is None and f['host'] in ('node', None))
    on_peers = sorted(set('%s@%s' % (f['code'], f['host']) for f in found
                          if f['severity'] != 'info' and f['host'] not in ('node', None)))
    return all(EXPECTED[name][0] in roots for name in fault_names), sorted(roots), on_peers


def run():
    cases = [(name,) for name in sorted(EXPECTED)]
    cases += [pair for pair in itertools.combinations(sorted(EXPECTED), 2)
              if EXPECTED[pair[0]][1] == EXPECTED[pair[1]][1] and pair not in CONTRADICT]
    results = []
    for names in cases:
        try:
            right, roots, on_peers = case(EXPECTED[names[0]][1], names)
        except (KeyError, ValueError) as exc:   # a pair that cannot be combined on one profile
            results.append({'faults': names, 'skipped': str(exc)})
            continue
        results.append({'faults': names, 'right': right, 'roots': roots, 'on_peers': on_peers})
    healthy = dict((name, [f['code'] for f in _diagnose.diagnose({'node': node_facts(name)}) if f['severity'] != 'info'])
                   for name in HEALTHY)
    # The fleet rule on identical nodes: whatever it adds to the single-node findings is false.
    healthy_fleet = dict((name, sorted(set(f['code'] for f in _diagnose.diagnose(fleet(name))
                                           if f['severity'] != 'info' and f['code'].startswith('FLEET_'))))
                         for name in HEALTHY)
    judged = [r for r in results if 'right' in r]
    unusual_alone, unusual_fleets = unusual_run()
    return {'unusual_findings_above_info': unusual_alone, 'unusual_fleet_findings_above_info': unusual_fleets,
            'cases': len(judged), 'right': sum(r['right'] for r in judged),
            'share_right': round(sum(r['right'] for r in judged) / float(len(judged)), 3),
            'wrong': [r for r in judged if not r['right']], 'skipped': [r for r in results if 'skipped' in r],
            'healthy_findings_above_info': healthy, 'healthy_fleet_findings_above_info': healthy_fleet,
            'peer_findings_above_info': dict((' + '.join(r['faults']), r['on_peers']) for r in judged if r['on_peers'])}


# ---------------------------------------------------------------------------- fabric faults
# Each fault of tests/sim/fabric.py on the simulated fat tree (16 nodes of nvidia_h100_8x_ndr,
# 8 rails, 4 leaves, 2 spines), the fabric discovered through ib_fabric_facts' own code over
# the stand-ins (tests/sim/tools_ibdiags.py); right when the expected code is a root finding.
FABRIC_EXPECTED = {
    'degraded_switch_link': 'FABRIC_LINK_DEGRADED',
    'missing_uplink': 'FABRIC_UPLINKS_ASYMMETRIC',
    'sm_absent': 'FABRIC_SM_ABSENT',
    'sm_duplicated': 'FABRIC_SM_MULTIPLE_MASTERS',
    'sm_standby_tie': 'FABRIC_SM_PRIORITY_TIE',
    'sm_standby_not_active': 'FABRIC_SM_INACTIVE',
    'flapping_link': 'FABRIC_LINK_FLAPPING',
}


def fabric_nodes(fault_names=(), base=None):
    """{host: facts} of the simulated pod with its fabric facts on the first node."""
    from tests.sim import fabric as sim_fabric, tools_ibdiags
    base = base or node_facts('nvidia_h100_8x_ndr')
    model = sim_fabric.model(faults=fault_names)
    nodes = dict((name, sim_fabric.node_facts(model, base, name)) for name in model['hosts'])
    with tempfile.TemporaryDirectory(prefix='gf-fabric-') as directory:
        path = sim_fabric.write(model, directory + '/fabric.json')
        nodes[sorted(nodes)[0]]['fabric'] = tools_ibdiags.fabric_facts(path, sorted(set(model['sm_lid_of'].values())))
    return nodes


def fabric_run():
    base = node_facts('nvidia_h100_8x_ndr')
    healthy = [f for f in _diagnose.diagnose(fabric_nodes((), base)) if f['severity'] != 'info']
    cases = []
    for name in sorted(FABRIC_EXPECTED):
        found = _diagnose.diagnose(fabric_nodes((name,), base))
        roots = sorted(set(f['code'] for f in found if f['explained_by'] is None and f['severity'] != 'info'))
        cases.append({'fault': name, 'right': FABRIC_EXPECTED[name] in roots, 'roots': roots})
    return {'cases': len(cases), 'right': sum(c['right'] for c in cases), 'wrong': [c for c in cases if not c['right']],
            'results': cases, 'healthy_findings_above_info': sorted(set('%s@%s' % (f['code'], f['host']) for f in healthy))}


def main():
    print(json.dumps(dict(run(), fabric=fabric_run()), indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
