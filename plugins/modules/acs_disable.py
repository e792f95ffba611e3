#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: acs_disable
short_description: Clear PCIe ACS control bits on the bridges between GPUs and RDMA NICs
version_added: 0.1.0
description:
  - PCIe Access Control Services with Request/Completion Redirect or Egress Control send
    peer-to-peer traffic up to the root complex, so GPUDirect RDMA between a GPU and a NIC
    under the same PCIe switch crawls or fails. This module clears the ACS Control register
    (extended capability 0x000D, offset +6) of chosen bridges.
  - By default only the bridges on GPU<->NIC paths that stay below one root port (distance
    C(PIX) or C(PXB), as C(hpc.gpu_fabric.gdr_facts) computes them) are touched. Turning ACS
    off everywhere is wrong on hosts that rely on IOMMU isolation between devices.
  - Writes go through sysfs' C(config) file, so the module needs root and no C(setpci).
    ACS settings do not survive a reboot or a hot-plug; the C(hpc.gpu_fabric.pcie_acs) role
    re-applies them at boot with RV(boot_plan).
  - The previous values are returned in RV(previous) so that O(restore) can put them back.
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
    description: Shows the ACSCtl bits of each bridge before and after.
  platform:
    platforms: posix
options:
  scope:
    description:
      - C(gpu_nic_paths) - the bridges on GPU<->NIC paths of distance PIX or PXB that have ACS.
      - C(devices) - exactly the bridges in O(devices); each must exist, be a bridge and have ACS.
      - C(all) - every bridge on the node that has an ACS capability.
      - Not set - C(devices) when O(devices) is given, else C(gpu_nic_paths).
    type: str
    choices: [gpu_nic_paths, devices, all]
  devices:
    description:
      - PCI addresses (C(0000:10:00.0) or C(10:00.0)) of the bridges to change; implies O(scope=devices).
      - An option that was set is never ignored - O(devices) with another O(scope), or with O(restore), fails the task.
    type: list
    elements: str
    default: []
  clear:
    description:
      - The ACS Control bits to clear, by their lspci names. The default clears the whole register.
    type: list
    elements: str
    choices: [SrcValid, TransBlk, ReqRedir, CmpltRedir, UpstreamFwd, EgressCtrl, DirectTrans]
    default: [SrcValid, TransBlk, ReqRedir, CmpltRedir, UpstreamFwd, EgressCtrl, DirectTrans]
  restore:
    description:
      - PCI address -> ACS Control value to write back, as returned in RV(previous) by an earlier run.
        Replaces O(scope), O(devices) and O(clear).
    type: dict
notes:
  - Run with C(become=true); extended PCI config space is readable and writable by root only.
'''

EXAMPLES = r'''
- name: ACS off on the GPU<->NIC paths found on the node
  hpc.gpu_fabric.acs_disable:
  become: true
  register: acs

- name: Two switch ports, explicitly
  hpc.gpu_fabric.acs_disable:
    scope: devices
    devices: ['0000:10:00.0', '10:10.0']
  become: true

- name: Put back what the first task found
  hpc.gpu_fabric.acs_disable:
    restore: "{{ acs.previous }}"
  become: true
'''

RETURN = r'''
devices:
  description: The bridges in scope, with their ACS Control value before and after.
  returned: always
  type: list
  elements: dict
  sample:
    - pci_address: "0000:10:00.0"
      before: 29
      after: 0
      before_flags: [SrcValid, ReqRedir, CmpltRedir, UpstreamFwd]
      after_flags: []
      changed: true
      paths: [GPU3-mlx5_0]
previous:
  description: PCI address -> ACS Control value before this run, for O(restore).
  returned: always
  type: dict
  sample: {"0000:10:00.0": 29}
boot_plan:
  description:
    - What the C(hpc.gpu_fabric.pcie_acs) role's boot script runs (filter C(hpc.gpu_fabric.boot_script)), one step
      per bridge in RV(devices), changed now or not - a reboot or a hot-plug resets them all. Each step is
      C({argv}), a C(setpci) write of VALUE:MASK into the ACS Control register - the bits in the mask set as in the
      value (O(clear) cleared; with O(restore) the whole register), the others as the kernel left them at boot. The
      module computes its own writes from the same value and mask, through sysfs.
    - A step that fails does not stop the others; the boot script then exits 1, so its unit shows failed. A bridge
      absent at boot gives setpci's warning "No devices selected", not a failure (pciutils setpci.c).
  returned: always
  type: list
  elements: dict
  sample:
    - {argv: [setpci, -s, "0000:10:00.0", "ECAP_ACS+0x6.w=0000:007f"]}
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths, _pci
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import read_gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

# P2P between a GPU and a NIC stays below the root port only at these distances;
# further away it crosses the root complex whatever ACS says.
P2P_CLASSES = ('PIX', 'PXB')


class AcsError(Exception):
    pass


def _acs_of(sysroot, bdf):
    acs = _pci.parse_acs(sysroot.binary('%s/%s/config' % (_pci.PCI_DEVICES, bdf)))
    if acs is None:
        raise AcsError('cannot read the extended config space of %s: run as root (become: true)' % bdf)
    return acs


def targets(sysroot, pci, scope, devices):
    """{bdf: [paths]} of the bridges to change, validated before anything is written."""
    if scope == 'devices':
        wanted = {}
        for text in devices:
            bdf = _pci.normalise_bdf(text)
            if bdf is None:
                raise AcsError('%r is not a PCI address (expected DDDD:BB:DD.F or BB:DD.F)' % text)
            if bdf not in pci:
                raise AcsError('no PCI device %s on this node' % bdf)
            if pci[bdf]['class'] is None or pci[bdf]['class'] >> 8 != _pci.BRIDGE_CLASS:
                raise AcsError('%s is not a PCI bridge (class %s): ACS is set on switch and root ports'
                               % (bdf, '0x%06x' % pci[bdf]['class'] if pci[bdf]['class'] is not None else 'unknown'))
            if not _acs_of(sysroot, bdf)['present']:
                raise AcsError('%s has no ACS capability' % bdf)
            wanted[bdf] = []
        return wanted
    if scope == 'all':
        return dict((bdf, []) for bdf, dev in sorted(pci.items())
                    if dev['class'] is not None and dev['class'] >> 8 == _pci.BRIDGE_CLASS and _acs_of(sysroot, bdf)['present'])
    gdr = read_gdr(sysroot, list_rdma_devices(sysroot))
    wanted = {}
    for pair in gdr['topology']:
        if pair['distance'] not in P2P_CLASSES:
            continue
        for bdf in pair['bridges']:
            if _acs_of(sysroot, bdf)['present']:
                wanted.setdefault(bdf, []).append('%s-%s' % (pair['gpu'], pair['nic']))
    return wanted


def _diff_text(entries, key):
    return ''.join('%s ACSCtl: %s\n' % (e['pci_address'], ' '.join(
        '%s%s' % (name, '+' if e[key] & bit else '-') for name, bit in _pci.ACS_BITS)) for e in entries)


def run(module, sysroot):
    params = module.params
    pci = _pci.read_pci(sysroot)
    if params['restore'] is not None:
        plan = {}
        for text, value in params['restore'].items():
            bdf = _pci.normalise_bdf(text)
            if bdf is None or bdf not in pci:
                raise AcsError('restore: %r is not a PCI device on this node' % text)
            try:
                plan[bdf] = ([], int(value), 0xffff)
            except (TypeError, ValueError):
                raise AcsError('restore: the value for %s must be an integer, got %r' % (bdf, value))
            if not 0 <= plan[bdf][1] <= 0xffff:
                raise AcsError('restore: %d is not a 16-bit register value' % plan[bdf][1])
    else:
        mask = _pci.acs_mask(params['clear'])
        plan = dict((bdf, (paths, 0, mask)) for bdf, paths in targets(sysroot, pci, params['scope'], params['devices']).items())

    # One plan, {bdf: (paths, value, mask)}: the writes now and the boot script's come from it.
    # Fixed-width lower-case addresses (normalise_bdf): their text order is the bus order.
    entries, boot_plan = [], []
    for bdf in sorted(plan):
        paths, value, mask = plan[bdf]
        acs = _acs_of(sysroot, bdf)
        if not acs['present']:
            raise AcsError('%s has no ACS capability' % bdf)
        want = _pci.acs_ctl_after(acs['ctl'], value, mask)
        boot_plan.append({'argv': _pci.setpci_acs_argv(bdf, value, mask)})
        entries.append({'pci_address': bdf, 'offset': acs['offset'], 'before': acs['ctl'], 'after': want,
                        'before_flags': _pci.acs_flags(acs['ctl']), 'after_flags': _pci.acs_flags(want),
                        'changed': want != acs['ctl'], 'paths': paths})

    changed = any(e['changed'] for e in entries)
    if changed and not module.check_mode:
        for entry in entries:
            if not entry['changed']:
                continue
            try:
                got = _pci.write_acs_ctl(sysroot, entry['pci_address'], entry['offset'], entry['after'])
            except _paths.NotRegular as exc:
                raise AcsError('%s: the config file of the device is %s; its ACSCtl was not written' % (entry['pci_address'], exc))
            if got != entry['after']:
                raise AcsError('%s: wrote ACSCtl 0x%04x but it reads back 0x%04x (bits not writable on this port?)'
                               % (entry['pci_address'], entry['after'], got))
    for entry in entries:
        del entry['offset']
    result = {
        'changed': changed,
        'devices': entries,
        'previous': dict((e['pci_address'], e['before']) for e in entries),
        'boot_plan': boot_plan,
    }
    if module._diff:
        changed_entries = [e for e in entries if e['changed']]
        result['diff'] = {'before': _diff_text(changed_entries, 'before'), 'after': _diff_text(changed_entries, 'after')}
    return result


def main():
    acs_names = [name for name, _bit in _pci.ACS_BITS]
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', default='/'),
            scope=dict(type='str', choices=['gpu_nic_paths', 'devices', 'all']),
            devices=dict(type='list', elements='str', default=[]),
            clear=dict(type='list', elements='str', choices=acs_names, default=acs_names),
            restore=dict(type='dict'),
        ),
        required_if=[('scope', 'devices', ('devices',))],
        supports_check_mode=True,
    )
    params = module.params
    # An option the user set is never ignored: devices implies its scope, and contradicts another.
    if params['devices'] and params['restore'] is not None:
        module.fail_json(msg='devices and restore are mutually exclusive: restore writes back the bridges it names')
    if params['devices'] and params['scope'] not in (None, 'devices'):
        module.fail_json(msg='devices lists bridges, but scope=%s chooses them itself: drop devices, or use scope=devices'
                         % params['scope'])
    if params['scope'] is None:
        params['scope'] = 'devices' if params['devices'] else 'gpu_nic_paths'
    if params['scope'] == 'devices' and not params['devices']:
        module.fail_json(msg='scope=devices needs the PCI addresses of the bridges in devices')
    sysroot = SysRoot(module.params['root'])
    if not sysroot.isdir(_pci.PCI_DEVICES):
        module.fail_json(msg='no %s below root %s: not a Linux node or snapshot' % (_pci.PCI_DEVICES, module.params['root']))
    try:
        result = run(module, sysroot)
    except AcsError as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg='cannot write PCI config space: %s (run as root: become: true)' % exc)
    for warning in sysroot.warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
