#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: ib_link_facts
short_description: InfiniBand and RoCE HCA, port, GID and counter facts from sysfs
version_added: 0.1.0
description:
  - Reads every RDMA device of the node from C(/sys/class/infiniband) and C(/sys/class/net)
    (device attributes, PCI address and NUMA node, and per port the state, physical state,
    rate (as C(rate_gbps), C(width) and C(speed)), link layer, LIDs, populated GIDs with their
    RoCE type, netdev and IPv4, the netdev's MTU and operstate, C(counters), C(counters_ext)
    and C(hw_counters)).
  - Needs no infiniband-diags. Only with O(ibv_devinfo=true) is C(ibv_devinfo) run, to learn
    the active MTU of InfiniBand ports (sysfs does not carry it); the result says whether it was.
  - A node without RDMA devices returns C(devices=[]) and succeeds.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - hpc.gpu_fabric.root
  - hpc.gpu_fabric.root.facts
options:
  ibv_devinfo:
    description:
      - Run C(ibv_devinfo) (when it is installed) to add the active MTU of InfiniBand ports.
      - RoCE ports get their active MTU from the netdev MTU either way.
    type: bool
    default: false
notes:
  - Counters that have saturated at the maximum of their IBTA width (for example C(link_downed) at 255)
    are listed in C(counters_saturated); their value is a lower bound.
'''

EXAMPLES = r'''
- name: Gather link facts
  hpc.gpu_fabric.ib_link_facts:

- name: Every port that is not ACTIVE
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpu_fabric_ib.devices | community.general.json_query(query) }}"
  vars:
    query: "[].ports[?state != 'ACTIVE'][]"

- name: Analyse a snapshot captured from a customer's node
  hpc.gpu_fabric.ib_link_facts:
    root: /srv/snapshots/gpu017
  delegate_to: localhost
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu_fabric_ib:
      description: RDMA devices and where the facts came from.
      type: dict
      returned: always
      contains:
        devices:
          description: One entry per RDMA device, sorted by name; empty on a node without RDMA.
          type: list
          elements: dict
          returned: always
          sample:
            - name: mlx5_0
              hca_type: MT4129
              fw_ver: 28.41.1000
              pci_address: "0000:1a:00.0"
              numa_node: 0
              driver: mlx5_core
              ports:
                - port: 1
                  state: ACTIVE
                  phys_state: LinkUp
                  rate: 400 Gb/sec (4X NDR)
                  rate_gbps: 400.0
                  width: 4X
                  speed: NDR
                  link_layer: InfiniBand
                  lid: 18
                  sm_lid: 1
                  netdev: ib0
                  netdev_mtu: 4092
                  netdev_operstate: up
                  active_mtu: null
                  active_mtu_source: null
                  gids:
                    - index: 0
                      gid: fe80:0000:0000:0000:a088:c203:005a:ab6c
                      type: IB/RoCE v1
                      netdev: null
                      ipv4: null
                  counters:
                    symbol_error: 0
                    link_downed: 0
                  counters_saturated: []
                  counters_unavailable: []
                  hw_counters:
                    out_of_sequence: 0
        ibv_devinfo:
          description: C(disabled), C(used), C(not installed) or C(failed) with the reason.
          type: str
          returned: always
          sample: disabled
        root:
          description: The root the facts were read below.
          type: str
          returned: always
          sample: /
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import parse_ibv_devinfo, read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import without_surrogates
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot


def ibv_devinfo_mtus(module):
    """Active MTUs from ibv_devinfo, and how that went."""
    binary = module.get_bin_path('ibv_devinfo')
    if binary is None:
        return {}, 'not installed'
    rc, out, err = module.run_command([binary], environ_update={'LC_ALL': 'C'})
    if rc != 0:
        return {}, 'failed: rc=%d %s' % (rc, (err or out).strip().splitlines()[-1] if (err or out).strip() else '')
    return parse_ibv_devinfo(out), 'used'


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', default='/'),
            ibv_devinfo=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    root = module.params['root']
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory: give / or the path of an unpacked node snapshot' % root)

    mtus, ibv_state = {}, 'disabled'
    if module.params['ibv_devinfo'] and root == '/':
        mtus, ibv_state = ibv_devinfo_mtus(module)
    elif module.params['ibv_devinfo']:
        ibv_state = 'not used: root is a snapshot, not this node'

    sysroot = SysRoot(root)
    # Names read from the tree (counters, netdevs, link targets) that are not UTF-8 are
    # reported as U+FFFD with a warning: one bad name must not cost the node its other facts.
    devices = without_surrogates(read_ib(sysroot, mtus), sysroot.warn, 'gpu_fabric_ib.devices')
    for warning in sysroot.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={'gpu_fabric_ib': {
        'devices': devices,
        'ibv_devinfo': ibv_state,
        'root': root,
    }})


if __name__ == '__main__':
    main()
