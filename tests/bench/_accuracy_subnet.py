# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Accuracy of the subnet's port counters (ibqueryerrors and the bring-up window) on the
simulated fat tree (tests/sim/fabric.py), the fabric discovered through ib_fabric_facts' own code over
the stand-ins (tests/sim/tools_ibdiags.py), as diagnosis_accuracy.fabric_run() builds its cases.

Each case pairs a fault with the code and the place it must be named on:
  subnet_port_errors  IB_SUBNET_ERRORS (error) on leaf-2's up-link to spine-2: a port no pair test crosses
  flapping_link       FABRIC_LINK_FLAPPING (error) on gpu-05 mlx5_3's cable: retraining, named once
  bring_up_errors     the trap: IB_SUBNET_ERRORS at info only (inside the grace window), nothing above info
The fabric cases carry no benchmark, as fabric_run()'s do. ``misattributed`` counts findings of these
codes above info on any other port (a root named where the fault is not), ``false_positives`` findings
above info of these codes in the healthy pod and in the trap."""

from __future__ import annotations

CODES = ('IB_SUBNET_ERRORS', 'FABRIC_LINK_FLAPPING', 'FABRIC_ERROR_RATE')
CASES = {
    'subnet_port_errors': ('IB_SUBNET_ERRORS', 'error', ['link', '0x0000000050000002/5', '0x0000000051000002/37']),
    'flapping_link': ('FABRIC_LINK_FLAPPING', 'error', ['link', '0x0000000051000002/21', '0x0000100005000004/1']),
    'bring_up_errors': ('IB_SUBNET_ERRORS', 'info', None),
}


def _found(faults, base):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
    from tests.bench.diagnosis_accuracy import fabric_nodes
    return [f for f in _diagnose.diagnose(fabric_nodes(faults, base)) if f['code'] in CODES]


def run():
    """{'right', 'total', 'false_positives', 'misattributed', 'results'}."""
    from tests.bench.diagnosis_accuracy import node_facts, progress
    base = node_facts('nvidia_h100_8x_ndr')
    healthy = [f for f in _found((), base) if f['severity'] != 'info']
    results, right, misattributed, false_positives = [], 0, 0, len(healthy)
    for name, (code, severity, place) in sorted(CASES.items()):
        found = _found((name,), base)
        above = [f for f in found if f['severity'] != 'info']
        if severity == 'info':
            ok = not above and any(f['code'] == code and f['severity'] == 'info' for f in found)
            false_positives += len(above)
        else:
            named = [f for f in above if f['code'] == code and place in f['at'] and f['explained_by'] is None]
            wrong = [f for f in above if f not in named]
            misattributed += len(wrong)
            ok = len(named) == 1 and not wrong
        right += ok
        results.append({'fault': name, 'right': ok, 'found': [(f['code'], f['severity'], f['subject']) for f in found]})
        progress('subnet case %s: %s' % (name, 'right' if ok else 'WRONG'))
    return {'right': right, 'total': len(CASES), 'false_positives': false_positives, 'misattributed': misattributed,
            'healthy_findings_above_info': [(f['code'], f['subject']) for f in healthy], 'results': results}
