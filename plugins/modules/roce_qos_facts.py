#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: roce_qos_facts
short_description: RoCE lossless (QoS) facts of every RoCE port
version_added: 0.2.0
description:
  - For every RDMA port whose link layer is Ethernet, reads what lossless RoCE depends on - the
    trust mode, the DSCP to priority map, PFC per priority, priority to traffic class and the
    TCs' transmission selection (from C(mlnx_qos), else iproute2's C(dcb); each port's C(source)
    says which), ECN per priority for the notification and reaction points and the CNP DSCP and
    802.1p priority (C(/sys/class/net/IF/ecn)), the RDMA CM default ToS (configfs), the netdev and
    RoCE MTUs, the RoCE v2 GID index, and the congestion and loss counters.
  - A node without RoCE ports returns C(ports=[]) and succeeds. docs/roce.md explains each value.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - hpc.gpu_fabric.root
  - hpc.gpu_fabric.root.facts
options:
  qos_tools:
    description:
      - When to run C(mlnx_qos) / C(dcb) for the DCB settings.
      - C(auto) - only when O(root) is C(/) (a snapshot of another node cannot be asked).
      - C(always) - also below another root (a simulated node whose stand-ins act on it).
      - C(never) - not at all; the DCB fields are then null and the port's C(source_reason) says why.
    type: str
    choices: [auto, always, never]
    default: auto
  timeout:
    description: Seconds each tool run may take.
    type: int
    default: 20
'''

EXAMPLES = r'''
- name: Gather RoCE lossless facts
  hpc.gpu_fabric.roce_qos_facts:

- name: Ports without PFC on priority 3
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpu_fabric_roce.ports | rejectattr('pfc', 'contains', 3) | map(attribute='netdev') }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu_fabric_roce:
      description: The RoCE ports and where the facts came from.
      type: dict
      returned: always
      contains:
        ports:
          description: One entry per RoCE port; empty on a node without one.
          type: list
          elements: dict
          returned: always
          sample:
            - hca: mlx5_0
              port: 1
              netdev: ens10f0np0
              state: ACTIVE
              netdev_mtu: 9000
              active_mtu: 4096
              gid_index: 3
              trust: dscp
              pfc: [3]
              dscp2prio: {"26": 3}
              prio_tc: {"0": 1, "1": 0, "3": 3}
              tc_tsa: {"3": vendor, "6": strict}
              tc_bw: null
              source: mlnx_qos
              source_reason: null
              ecn_np: {"3": true}
              ecn_rp: {"3": true}
              cnp_dscp: 48
              cnp_prio: 6
              roce_tos: 106
              roce_tos_source: configfs
              counters: {np_cnp_sent: 0, rp_cnp_handled: 0, out_of_sequence: 0}
        root:
          description: The root the facts were read below.
          type: str
          returned: always
          sample: /
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._roce import read_roce, tool_runner
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import without_surrogates
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', default='/'),
            qos_tools=dict(type='str', choices=['auto', 'always', 'never'], default='auto'),
            timeout=dict(type='int', default=20),
        ),
        supports_check_mode=True,
    )
    root = module.params['root']
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory: give / or the path of an unpacked node snapshot' % root)
    if module.params['timeout'] < 1:
        module.fail_json(msg='timeout must be at least 1 second')
    tools = module.params['qos_tools']
    run = None
    if tools == 'always' or (tools == 'auto' and root == '/'):
        run = tool_runner(module.get_bin_path, module.params['timeout'])
    sysroot = SysRoot(root)
    ports = without_surrogates(read_roce(sysroot, read_ib(sysroot), run), sysroot.warn, 'gpu_fabric_roce.ports')
    for warning in sysroot.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={'gpu_fabric_roce': {'ports': ports, 'root': root}})


if __name__ == '__main__':
    main()
