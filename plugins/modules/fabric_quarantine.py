#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: fabric_quarantine
short_description: Act on a report's verdicts in the scheduler - drain the blamed nodes, resume the cleared ones
version_added: 0.1.0
description:
  - Reads a C(report.json) on the controller and, with O(scheduler=slurm), runs M(hpc.gpu_fabric.slurm_node_state)
    on the task's host (or its C(delegate_to)), where C(scontrol) talks to the cluster's slurmctld.
  - >-
    A node's verdict is its C(hosts.<name>.status) in the report; the drain reason names its first root cause of
    severity error (C(gpu_fabric: IB_PORT_DOWN mlx5_1/1)), the finding's id is in C(quarantine.json).
  - Writes C(quarantine.json) (what was done, or would be in check mode, and why, node by node; the cap and the
    nodes it held back) into O(dest), and prints one line per node.
  - With O(scheduler=none) (the default of the role) it does nothing and says so.
  - Runs in the controller process through its action plugin.
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
  scheduler:
    description: The scheduler to act in; V(none) does nothing.
    type: str
    choices: [none, slurm]
    default: none
  report:
    description: The path of the C(report.json) on the controller.
    type: path
  dest:
    description: The directory C(quarantine.json) goes into (default the report's).
    type: path
  quarantine_max:
    description: The share of the scheduler's nodes that may be drained at once (at least one node).
    type: float
    default: 0.1
  scontrol:
    description: The scontrol command on the host that runs it.
    type: str
    default: scontrol
'''

EXAMPLES = r'''
- name: Drain the nodes this run's report blames
  hpc.gpu_fabric.fabric_quarantine:
    scheduler: slurm
    report: ./fabric-report/report.json
    quarantine_max: 0.1
  delegate_to: slurm-head
'''

RETURN = r'''
nodes:
  description: M(hpc.gpu_fabric.slurm_node_state)'s C(nodes) - the outcome for each node, with its state after.
  returned: when scheduler is not none
  type: list
  elements: dict
capped:
  description: Nodes with an error verdict left in service because the cap was reached.
  returned: when scheduler is not none
  type: list
  elements: str
lines:
  description: The lines printed.
  returned: always
  type: list
  elements: str
record:
  description: The path of C(quarantine.json).
  returned: when scheduler is not none
  type: str
'''

from ansible.module_utils.basic import AnsibleModule


def main():
    # Only reached when the action plugin is bypassed (a copy of the module alone).
    module = AnsibleModule(argument_spec=dict(scheduler=dict(type='str', default='none', choices=['none', 'slurm']),
                                              report=dict(type='path'), dest=dict(type='path'),
                                              quarantine_max=dict(type='float', default=0.1),
                                              scontrol=dict(type='str', default='scontrol')),
                           supports_check_mode=True)
    module.fail_json(msg='fabric_quarantine runs on the controller through its action plugin (hpc.gpu_fabric collection)')


if __name__ == '__main__':
    main()
