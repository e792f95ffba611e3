#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: slurm_node_state
short_description: Drain the Slurm nodes a report blames, resume the ones a newer report cleared
version_added: 0.1.0
description:
  - >-
    Reads every node's state and reason with C(scontrol show node -o) and, from the verdicts given (role
    C(fabric_quarantine) makes them from C(report.json)), drains each node whose verdict is C(error) with the
    reason C(gpu_fabric: <CODE> <subject>) (100 characters at most), and resumes a node it drained itself once a
    report made after the drain says it is ok or warning and ran the check that found the fault.
  - >-
    Never touches a node drained, down or failed for a reason that does not start with C(gpu_fabric: ) - an admin's
    maintenance, Slurm's C(Not responding), another health check's.
  - Drains with C(State=DRAIN), never C(DOWN) - jobs running on the node end in peace (the node reads MIXED+DRAIN
    or ALLOCATED+DRAIN, C(draining) in sinfo, until they do).
  - Drains no more than O(quarantine_max) of the Slurm nodes at once (nodes already drained by it count); the nodes
    beyond are named in C(capped) and in the message.
  - Runs C(scontrol) with argument lists only; a node name that scontrol would read as a hostlist expression is
    refused.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  verdicts:
    description:
      - Node name to verdict - V(status) (V(ok), V(warning), V(error), V(unreachable)), V(reason) (the drain
        reason), V(finding) (the finding id), V(stages) (the checks the report ran for the node - V(facts),
        V(bench), V(collective)).
    type: dict
    required: true
  report_time:
    description:
      - When the report was made, in seconds since the epoch. A node is resumed only by a report newer than its
        drain.
    type: float
  quarantine_max:
    description:
      - The share of the Slurm nodes that may be drained by this module at once (at least one node).
    type: float
    default: 0.1
  scontrol:
    description:
      - The scontrol command, found on E(PATH) when not absolute.
    type: str
    default: scontrol
notes:
  - C(scontrol update) needs root or a Slurm administrator or operator.
'''

EXAMPLES = r'''
- name: Drain the nodes the report blames
  hpc.gpu_fabric.slurm_node_state:
    verdicts:
      n1: {status: error, reason: "gpu_fabric: IB_PORT_DOWN mlx5_1/1", finding: IB_PORT_DOWN@n1/mlx5_1/1, stages: [facts]}
    report_time: 1795857447
    quarantine_max: 0.1
'''

RETURN = r'''
nodes:
  description: One entry per node of the verdicts and per node drained by this module before.
  returned: always
  type: list
  elements: dict
  sample:
    - {node: n1, outcome: drained, why: IB_PORT_DOWN@n1/mlx5_1/1, finding: IB_PORT_DOWN@n1/mlx5_1/1, state_before: IDLE,
       state_after: IDLE+DRAIN, reason_after: "gpu_fabric: IB_PORT_DOWN mlx5_1/1"}
actions:
  description: The scontrol updates made, or that would be made in check mode.
  returned: always
  type: list
  elements: dict
capped:
  description: Error nodes left in service because the cap was reached.
  returned: always
  type: list
  elements: str
cap:
  description: How many nodes may be drained by this module at once.
  returned: always
  type: int
total:
  description: The Slurm nodes scontrol listed.
  returned: always
  type: int
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _slurm


def _scontrol(module, args):
    """(rc, out, err) of scontrol with ``args`` (a list), times in the standard format whatever the user's."""
    env = {'SLURM_TIME_FORMAT': 'standard'}
    return module.run_command([module.params['scontrol']] + args, environ_update=env, check_rc=False)


def _read(module):
    rc, out, err = _scontrol(module, ['show', 'node', '-o'])
    if rc != 0:
        module.fail_json(msg='scontrol show node -o failed (exit %d): %s' % (rc, _slurm.printable(err or out, 500)))
    try:
        return _slurm.parse_nodes(out)
    except _slurm.SlurmOutputError as error:
        module.fail_json(msg='scontrol show node -o: %s' % error)
    return None


def main():
    module = AnsibleModule(
        argument_spec={
            'verdicts': {'type': 'dict', 'required': True},
            'report_time': {'type': 'float'},
            'quarantine_max': {'type': 'float', 'default': _slurm.DEFAULT_SHARE},
            'scontrol': {'type': 'str', 'default': 'scontrol'},
        },
        supports_check_mode=True,
    )
    share = module.params['quarantine_max']
    if not 0 < share <= 1:
        module.fail_json(msg='quarantine_max must be a share of the nodes above 0 and at most 1, not %s' % share)
    verdicts = {}
    for name, verdict in module.params['verdicts'].items():
        if isinstance(verdict, dict):
            verdicts[str(name)] = verdict
    if not os.path.isabs(module.params['scontrol']) and module.get_bin_path(module.params['scontrol']) is None:
        module.fail_json(msg='%s not found on PATH: this host is no Slurm client' % module.params['scontrol'])
    before = _read(module)
    planned = _slurm.plan(before, verdicts, share, module.params['report_time'])
    failed = []
    if not module.check_mode:
        for action in planned['actions']:
            args = ['update', 'nodename=%s' % action['node']]
            if action['action'] == 'drain':
                args += ['state=DRAIN', 'reason=%s' % action['reason']]
            else:
                args += ['state=RESUME']
            rc, out, err = _scontrol(module, args)
            if rc != 0:
                failed.append('%s %s: %s' % (action['action'], action['node'], _slurm.printable(err or out, 300)))
    after = _read(module) if planned['actions'] and not module.check_mode else before
    for entry in planned['nodes']:
        node = after.get(entry['node'])
        entry['state_after'] = node['state'] if node else None
        entry['reason_after'] = node.get('reason') if node else None
    touched = sorted({action['node'] for action in planned['actions']})
    result = {
        'changed': bool(planned['actions']),
        'nodes': planned['nodes'],
        'actions': planned['actions'],
        'capped': planned['capped'],
        'cap': planned['cap'],
        'total': planned['total'],
    }
    if module._diff:
        # What the nodes' states and reasons would be: a drain adds DRAIN and our reason, a resume takes both away.
        def predicted(name):
            node = before[name]
            for action in planned['actions']:
                if action['node'] == name:
                    flags = [flag for flag in node['flags'] if flag != 'DRAIN']
                    if action['action'] == 'drain':
                        flags.append('DRAIN')
                    return ('%s %s %s' % (name, '+'.join([node['base']] + flags), action['reason'] or '')).rstrip()
            return _slurm.describe(node)
        result['diff'] = {
            'before_header': 'scontrol show node', 'after_header': 'scontrol show node',
            'before': ''.join(_slurm.describe(before[name]) + '\n' for name in touched),
            'after': ''.join(predicted(name) + '\n' for name in touched),
        }
    if failed:
        module.fail_json(msg='scontrol refused: %s' % '; '.join(failed), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
