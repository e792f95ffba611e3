#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: roce_qos
short_description: Set the RoCE lossless configuration of every RoCE port
version_added: 0.2.0
description:
  - Sets, on every ACTIVE RoCE port (or those in O(netdevs)), the trust mode, PFC on O(priority) only,
    the DSCP O(dscp) to O(priority) entry of the DSCP map (through C(mlnx_qos), else iproute2's C(dcb)),
    ECN for O(priority) at the notification and reaction points and the CNP DSCP and priority
    (C(/sys/class/net/IF/ecn), mlx5), and the RDMA CM default ToS (configfs).
  - Reads first and changes only what differs; in check mode it reports the drift (with C(--diff), field by field).
    After a change it reads again and fails when a value did not take.
  - None of these settings survive a reboot or a driver reload; the C(hpc.gpu_fabric.roce_qos) role installs a
    boot unit whose script runs RV(boot_plan). docs/roce.md says why each value.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hpc.gpu_fabric.root
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    description: Each changed field of each port, before and after.
  platform:
    platforms: posix
options:
  trust:
    description: Trust mode; C(dscp) for routed RoCE v2, which carries no VLAN PCP.
    type: str
    choices: [dscp, pcp]
    default: dscp
  priority:
    description: The lossless priority of RDMA traffic (PFC and ECN on it, PFC off elsewhere).
    type: int
    default: 3
  dscp:
    description: The DSCP RDMA traffic is marked with (O(tos) >> 2), mapped to O(priority).
    type: int
    default: 26
  ecn:
    description: Enable ECN (DCQCN) for O(priority) at the notification and reaction points.
    type: bool
    default: true
  cnp_dscp:
    description: DSCP of the congestion notification packets.
    type: int
    default: 48
  cnp_priority:
    description: 802.1p priority of the congestion notification packets.
    type: int
    default: 6
  tos:
    description: RDMA CM default ToS (DSCP << 2 | ECN bits; 106 is DSCP 26 with ECT(0)). Null leaves it.
    type: int
    default: 106
  netdevs:
    description: Only these RoCE netdevs; all ACTIVE RoCE ports when empty.
    type: list
    elements: str
    default: []
  qos_tools:
    description: As in M(hpc.gpu_fabric.roce_qos_facts); C(auto) runs the tools only when O(root) is C(/).
    type: str
    choices: [auto, always, never]
    default: auto
  timeout:
    description: Seconds each tool run may take.
    type: int
    default: 20
'''

EXAMPLES = r'''
- name: Lossless RoCE on priority 3, DSCP 26, ToS 106
  hpc.gpu_fabric.roce_qos:
'''

RETURN = r'''
ports:
  description: The RoCE netdevs in scope.
  returned: always
  type: list
  elements: str
  sample: [ens10f0np0]
changes:
  description: What differed (or was changed), per port.
  returned: always
  type: list
  elements: dict
  sample: [{netdev: ens10f0np0, field: pfc, before: [], after: [3]}]
skipped:
  description: Why nothing was done (no RoCE port), else null.
  returned: always
  type: str
  sample: no RoCE port on this node
boot_plan:
  description:
    - Every setting of every port in RV(ports), as the steps that set it, in the order they run - whatever differs now
      (a reboot or a driver reload resets them all). The steps the module runs now are these same steps of the fields
      in RV(changes); the C(hpc.gpu_fabric.roce_qos) role writes its boot script from this list
      (filter C(hpc.gpu_fabric.boot_script)).
    - Each step is one of C({argv}) (run the command; the DCB part with the tool that read the port, C(mlnx_qos) or
      C(dcb)), C({write, value, skip_if_absent}) (write the value and a newline into the sysfs or configfs file;
      with C(skip_if_absent) nothing is done where the file is absent - the ECN and CNP files of MLNX OFED's mlx5),
      C({mkdir}) (make the RDMA CM configfs directory of the device unless it is there).
    - A step that fails does not stop the others; the boot script then exits 1, so its unit shows failed.
    - Empty when no port is in scope.
  returned: always
  type: list
  elements: dict
  sample:
    - {argv: [mlnx_qos, -i, ens10f0np0, --trust, dscp]}
    - {argv: [mlnx_qos, -i, ens10f0np0, --pfc, '0,0,0,1,0,0,0,0']}
    - {argv: [mlnx_qos, -i, ens10f0np0, --dscp2prio, 'set,26,3']}
    - {write: /sys/class/net/ens10f0np0/ecn/roce_np/enable/3, value: '1', skip_if_absent: true}
    - {mkdir: /sys/kernel/config/rdma_cm/mlx5_0}
    - {write: /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos, value: '106', skip_if_absent: false}
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot


def _read(sysroot, run, netdevs):
    ports = [p for p in _roce.read_roce(sysroot, read_ib(sysroot), run) if p.get('state') == 'ACTIVE' and p.get('netdev')]
    return [p for p in ports if not netdevs or p['netdev'] in netdevs]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', default='/'),
            trust=dict(type='str', choices=['dscp', 'pcp'], default='dscp'),
            priority=dict(type='int', default=3),
            dscp=dict(type='int', default=26),
            ecn=dict(type='bool', default=True),
            cnp_dscp=dict(type='int', default=48),
            cnp_priority=dict(type='int', default=6),
            tos=dict(type='int', default=106),
            netdevs=dict(type='list', elements='str', default=[]),
            qos_tools=dict(type='str', choices=['auto', 'always', 'never'], default='auto'),
            timeout=dict(type='int', default=20),
        ),
        supports_check_mode=True,
    )
    params = module.params
    root = params['root']
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory' % root)
    for name, top in (('priority', 7), ('cnp_priority', 7), ('dscp', 63), ('cnp_dscp', 63), ('tos', 255)):
        if params[name] is not None and not 0 <= params[name] <= top:
            module.fail_json(msg='%s must be 0..%d, got %s' % (name, top, params[name]))
    if params['tos'] is not None and params['tos'] >> 2 != params['dscp']:
        module.fail_json(msg='tos %d carries DSCP %d, not dscp %d: RDMA CM traffic would miss the lossless class'
                         % (params['tos'], params['tos'] >> 2, params['dscp']))
    if params['qos_tools'] == 'never' or (params['qos_tools'] == 'auto' and root != '/'):
        module.fail_json(msg='roce_qos needs mlnx_qos or dcb to set trust and PFC: qos_tools=%s with root %s does not run them'
                         % (params['qos_tools'], root))
    sysroot = SysRoot(root)
    run = _roce.tool_runner(module.get_bin_path, params['timeout'])
    ports = _read(sysroot, run, params['netdevs'])
    missing = sorted(set(params['netdevs']) - set(p['netdev'] for p in ports))
    if missing:
        module.fail_json(msg='not ACTIVE RoCE netdevs of this node: %s' % ', '.join(missing))
    if not ports:
        module.exit_json(changed=False, ports=[], changes=[], boot_plan=[], skipped='no ACTIVE RoCE port on this node: nothing to configure')
    unread = [p['netdev'] for p in ports if p.get('source') is None]
    if unread:
        module.fail_json(msg='cannot read the DCB settings of %s: %s' % (', '.join(unread), ports[0].get('source_reason')))
    planned = [(port, change) for port in ports for change in _roce.plan(port, params, port['source'])]
    boot_plan = _roce.boot_steps(ports, params)
    changes = [{'netdev': port['netdev'], 'field': c[0], 'before': c[1], 'after': c[2]} for port, c in planned]
    diff = {'before': ''.join('%s %s: %s\n' % (c['netdev'], c['field'], c['before']) for c in changes),
            'after': ''.join('%s %s: %s\n' % (c['netdev'], c['field'], c['after']) for c in changes)}
    if module.check_mode or not planned:
        module.exit_json(changed=bool(planned), ports=[p['netdev'] for p in ports], changes=changes, boot_plan=boot_plan, skipped=None,
                         diff=diff)
    errors = [e for e in (_roce.apply(sysroot, run, change) for _port, change in planned) if e]
    if errors:
        module.fail_json(msg='; '.join(errors), changes=changes)
    # Read back: a value the driver refused (DCBX in firmware mode, an old driver) must not pass.
    # A fresh SysRoot: the first one remembers the configfs directories as missing.
    left = [(port['netdev'], c[0]) for port in _read(SysRoot(root), run, params['netdevs']) for c in _roce.plan(port, params, port['source'])]
    if left:
        module.fail_json(msg='set, but the port still differs: %s' % ', '.join('%s %s' % item for item in left), changes=changes)
    module.exit_json(changed=True, ports=[p['netdev'] for p in ports], changes=changes, boot_plan=boot_plan, skipped=None, diff=diff)


if __name__ == '__main__':
    main()
