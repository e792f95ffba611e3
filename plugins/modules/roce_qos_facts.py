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
  - Who manages the DCB (C(dcbx)) - mlnx_qos's DCBX mode, else C(dcb dcbx show), and lldpad's willing bits
    (C(lldptool -t -V PFC), C(-V ETS-CFG)) unless the NIC firmware runs DCBX - each tool with the same timeout;
    a tool that is missing or fails is said in C(not_read).
  - A node without RoCE ports returns C(ports=[]) and succeeds. docs/roce.md explains each value.
  - With O(from_log), the DCB settings come from saved outputs of those tools instead of running them
    (the outputs M(hpc.gpu_fabric.fabric_capture) saves into a snapshot, or a ticket's named the same way),
    so that a snapshot of another node is judged too. A port without a saved output keeps null DCB fields
    and its C(source_reason) says so; it is never taken as configured.
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
      - Not used with O(from_log) (nothing is run then).
    type: str
    choices: [auto, always, never]
    default: auto
  from_log:
    description:
      - Saved outputs to read instead of running C(mlnx_qos) / C(dcb) - directories and files. Each file is named
        C(<netdev>.<kind>.txt), C(kind) one of C(mlnx_qos) (C(mlnx_qos -i IF)), C(dcb_pfc) (C(dcb pfc show dev IF)),
        C(dcb_app) (C(dcb -N app show dev IF)), C(dcb_ets) (C(dcb ets show dev IF)), C(dcb_apptrust)
        (C(dcb apptrust show dev IF)), C(dcb_dcbx) (C(dcb dcbx show dev IF)), C(lldptool_pfc) (C(lldptool -t -V PFC -i IF))
        and C(lldptool_ets) (C(lldptool -t -V ETS-CFG -i IF)); in a directory, every entry is one. A snapshot holds them in
        C(.gpu_fabric_commands/roce_qos) below its root (M(hpc.gpu_fabric.fabric_capture)).
      - A file is the tool's stdout as printed, or as M(hpc.gpu_fabric.fabric_capture) writes it (a header of
        C(# key) lines with the command and its rc, or that the tool was not installed). mlnx_qos's output
        is used first, as on a live node, else dcb's.
      - Only regular files of at most 1 MiB are read, each when a port of the node asks for it. A file not
        named so, or whose netdev is no interface name (C(/), C(:), whitespace or a control character, 16 bytes
        or more), is not used and is listed in RV(ansible_facts.gpu_fabric_roce.from_log) with why. The ECN,
        CNP and ToS values still come from the files below O(root).
    type: list
    elements: path
  timeout:
    description: Seconds each tool run may take.
    type: int
    default: 20
  dcbx_expected:
    description:
      - Who is meant to manage the DCB (PFC, ETS, APP) of the RoCE ports, judged against each port's C(dcbx)
        (ROCE_DCBX_MISMATCH, docs/roce.md).
      - "C(host) - the host sets it (role M(hpc.gpu_fabric.roce_qos), C(gpu_fabric_roce_qos=true)); a willing LLDP agent
        or firmware-controlled DCBX lets the switch overwrite it."
      - "C(switch) - the switch sets it through DCBX; the host must take it (firmware DCBX or a willing LLDP agent)."
      - C(none) - nothing is meant, not judged.
    type: str
    choices: [host, switch, none]
    default: none
'''

EXAMPLES = r'''
- name: Gather RoCE lossless facts
  hpc.gpu_fabric.roce_qos_facts:

- name: Judge the DCB outputs a customer sent (ens1f0np0.mlnx_qos.txt, ...) against an unpacked snapshot
  hpc.gpu_fabric.roce_qos_facts:
    root: /srv/tickets/4711/node1/root
    from_log: /srv/tickets/4711/dcb
  delegate_to: localhost

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
          description:
            - One entry per RoCE port; empty on a node without one.
            - "C(dscp2prio) holds the DSCPs mapped to one priority; C(dscp_conflicts) those that C(dcb app) maps to
              several (C({\"63\": [1, 2]})), reported as C(ROCE_DSCP_CONFLICT); None where the map was not read."
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
              dscp_conflicts: {}
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
              dcbx: {mode: os, dcb_dcbx: null, lldp_willing: null, lldp_pfc: null,
                     not_read: {lldptool: lldptool (lldpad) not installed}, lldp_reason: lldptool (lldpad) not installed,
                     manager: host, why: "mlnx_qos: DCBX mode OS controlled; no LLDP agent answered (lldptool)"}
        dcbx_expected:
          description: O(dcbx_expected) (null for C(none)); each port's C(dcbx) says who manages it (C(manager) host, switch or
            null when not read, C(why)), from mlnx_qos's DCBX mode, C(dcb dcbx show) and lldptool's willing bits, and C(not_read).
          type: str
          returned: always
          sample: host
        root:
          description: The root the facts were read below.
          type: str
          returned: always
          sample: /
        from_log:
          description:
            - With O(from_log), the saved outputs - C(read) (files read), C(unused) (files of netdevs the node has
              no RoCE port for), C(refused) (C(path) and C(reason); the first 10) and C(refused_more) (how many more were
              refused, or not looked at past the first 1024 names of a directory) - else null.
          type: dict
          returned: always
          sample: {read: [/srv/n1/root/.gpu_fabric_commands/roce_qos/ens10f0np0.mlnx_qos.txt], unused: [], refused: [], refused_more: 0}
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._roce import SavedOutputs, read_roce, tool_runner
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import without_surrogates
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', default='/'),
            qos_tools=dict(type='str', choices=['auto', 'always', 'never'], default='auto'),
            timeout=dict(type='int', default=20),
            from_log=dict(type='list', elements='path'),
            dcbx_expected=dict(type='str', choices=['host', 'switch', 'none'], default='none'),
        ),
        supports_check_mode=True,
    )
    root = module.params['root']
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory: give / or the path of an unpacked node snapshot' % root)
    if module.params['timeout'] < 1:
        module.fail_json(msg='timeout must be at least 1 second')
    tools, from_log = module.params['qos_tools'], module.params['from_log']
    missing = [path for path in from_log or [] if not os.path.exists(path)]
    if missing:
        module.fail_json(msg='from_log: %s not found (give directories or files of saved mlnx_qos / dcb outputs)' % ', '.join(missing))
    run, saved = None, None
    if from_log is not None:
        run = saved = SavedOutputs(from_log)
    elif tools == 'always' or (tools == 'auto' and root == '/'):
        run = tool_runner(module.get_bin_path, module.params['timeout'])
    sysroot = SysRoot(root)
    ports = without_surrogates(read_roce(sysroot, read_ib(sysroot), run), sysroot.warn, 'gpu_fabric_roce.ports')
    facts = {'ports': ports, 'root': root, 'from_log': None,
             'dcbx_expected': None if module.params['dcbx_expected'] == 'none' else module.params['dcbx_expected']}
    if saved is not None:
        facts['from_log'] = without_surrogates({'read': saved.read, 'unused': saved.unused(), 'refused': saved.refused,
                                                'refused_more': saved.refused_more},
                                               sysroot.warn, 'gpu_fabric_roce.from_log')
        # The first few named, the rest counted (SAVED_REFUSED_LISTED): one warning per junk file flooded the console.
        for refused in facts['from_log']['refused']:
            sysroot.warn('from_log: %s not used: %s' % (refused['path'], refused['reason']))
        if saved.refused_more:
            sysroot.warn('from_log: %d more file(s) not used, not listed' % saved.refused_more)
    for warning in sysroot.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={'gpu_fabric_roce': facts})


if __name__ == '__main__':
    main()
