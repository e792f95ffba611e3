#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: gpu_state_facts
short_description: The GPUs' own state (clocks and why they are held, processes, NVLink, XID events, row remaps)
version_added: 0.1.0
description:
  - Reads every GPU's state with the vendor's tool in as few calls as it allows - for NVIDIA one
    C(nvidia-smi --query-gpu) with every field, one C(--query-compute-apps), and C(nvidia-smi nvlink -s)
    (then C(nvlink -e) only where a GPU has NVLink) - each with a timeout.
  - Reads the XID events of the kernel log (C(/dev/kmsg) without blocking, a bounded number of bytes; else
    C(dmesg) with a timeout) with the severity of NVIDIA's XID catalog.
  - Names the owner of each compute process from C(/proc/<pid>/status) below O(root).
  - A missing tool, a refused call or an unreadable kernel log puts the part in C(not_read) with why, never
    read as healthy. AMD (C(amd-smi), C(rocm-smi)) and MetaX (C(mx-smi)) tools are detected and said not read
    (no parser for their output yet).
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - hpc.gpu_fabric.root
  - hpc.gpu_fabric.root.facts
options:
  parts:
    description: What to read; the idle gate before a benchmark reads C(processes) only.
    type: list
    elements: str
    choices: [gpus, processes, nvlink, xid]
    default: [gpus, processes, nvlink, xid]
  timeout:
    description: Seconds each tool call may take before it is killed.
    type: int
    default: 20
  monitoring_agents:
    description:
      - Process names of monitoring agents of your own, beside those C(plugins/module_utils/_gpu_state.py) knows
        (DCGM's C(nv-hostengine), C(dcgm-exporter), ...); a compute process of such a name holding at most 1024 MiB is
        not another job on the GPU.
    type: list
    elements: str
    default: []
  from_log:
    description:
      - A directory of the tool's saved outputs (C(query_gpu.txt), C(compute_apps.txt), C(nvlink_s.txt), C(nvlink_e.txt), each call's
        stdout, and the kernel log as C(kmsg.txt)) to read instead of running it; C(playbooks/offline.yml) gives the snapshot's
        C(.gpu_fabric_commands/gpu_state).
      - A directory that is not there leaves the tool's parts not read (a snapshot is never judged by the GPUs of the machine that
        reads it).
    type: path
  before_benchmark:
    description:
      - The state is read just before a benchmark over the GPUs (role C(fabric_bench)); the facts say so (C(before_benchmark)),
        and another process found on a GPU makes that benchmark's tests through it contaminated.
    type: bool
    default: false
  as_facts:
    description: Return the state as C(ansible_facts.gpu_fabric_gpu) (true) or as C(gpu_fabric_gpu) of the result only (false,
      for the idle gate, which leaves the facts of validate as they were).
    type: bool
    default: true
'''

EXAMPLES = r'''
- name: Read the GPUs' own state
  hpc.gpu_fabric.gpu_state_facts:

- name: Which compute processes hold a GPU now (the idle gate)
  hpc.gpu_fabric.gpu_state_facts:
    parts: [processes]
    as_facts: false
  register: gate
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host (O(as_facts) true).
  returned: always
  type: dict
  contains:
    gpu_fabric_gpu:
      description:
        - C(tool) (C(nvidia-smi) or null), C(driver_version), C(gpus) (one entry per GPU - C(bdf), C(index), C(uuid), C(name),
          C(vbios), C(pstate), C(temperature_c), C(power_w), C(power_limit_w), clocks, C(clock_reasons) the active reasons,
          C(utilization_pct), memory, C(ecc_uncorrected), C(retired_pages_pending), C(remapped_rows_pending),
          C(remapped_rows_failure), PCIe, C(nvlink) - C(links), C(active), C(inactive), C(speed_gbs), C(errors) - or null),
          C(processes) (C(bdf), C(pid), C(name), C(used_mib), C(user)), C(xid) (C(bdf), C(xid), C(kind), C(severity),
          C(meaning), C(text), C(count)), C(not_read) (part -> why) and C(calls) (each call's outcome).
      type: dict
      returned: always
      sample:
        tool: nvidia-smi
        driver_version: 580.159.04
        gpus:
          - {bdf: "0000:00:06.0", index: 0, name: NVIDIA H200, clock_reasons: [gpu_idle], remapped_rows_pending: false,
             nvlink: {links: 18, active: 18, inactive: [], speed_gbs: 26.562, errors: {replay: 0, recovery: 0, crc: 0}}}
        processes: [{bdf: "0000:00:07.0", pid: 3294, name: python3, used_mib: 1644, user: root}]
        xid: []
        not_read: {}
gpu_fabric_gpu:
  description: The same state, where O(as_facts) is false.
  returned: when as_facts is false
  type: dict
elapsed_ms:
  description: Milliseconds the reads took, tool calls and the kernel log together.
  returned: always
  type: int
  sample: 240
timings:
  description: Each tool call with its milliseconds (none where saved outputs were read).
  returned: always
  type: list
  elements: dict
  sample: [{argv: [nvidia-smi, --query-gpu=index,...], ms: 67}]
'''

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gpu_state, _paths, _process
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import without_surrogates
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

# Other vendors' tools: detected, not read (no parser proven on their real output yet).
OTHER_TOOLS = ('amd-smi', 'rocm-smi', 'mx-smi')


def kernel_log(module, sysroot, root, runner, from_log=None):
    """(text, why not read or None). Saved outputs (``from_log``): their kmsg.txt. Below a root other
    than / (a snapshot, a simulated node) its dev/kmsg as a file; on the node /dev/kmsg, else dmesg
    with a timeout."""
    if from_log is not None:
        try:
            return _paths.read_regular(os.path.join(from_log, 'kmsg.txt'), _gpu_state.KMSG_BYTES).decode('utf-8', 'replace'), None
        except (OSError, ValueError) as exc:
            if root == '/':
                return '', 'no saved kernel log in %s (%s)' % (from_log, getattr(exc, 'strerror', None) or exc)
    if root != '/':
        text = sysroot.text('dev/kmsg', quiet=True)
        return (text, None) if text is not None else ('', 'no kernel log below the root (dev/kmsg)')
    try:
        return _gpu_state.read_kmsg(), None
    except OSError as exc:
        first = '/dev/kmsg: %s' % (exc.strerror or exc)
    dmesg = module.get_bin_path('dmesg', required=False)
    if not dmesg:
        return '', '%s; dmesg not found' % first
    out, _err, why = runner([dmesg])
    return (out, None) if why is None else ('', '%s; dmesg: %s (kernel.dmesg_restrict lets only root read it)' % (first, why))


def main():
    module = AnsibleModule(
        argument_spec=dict(root=dict(type='path', default='/'),
                           parts=dict(type='list', elements='str', choices=['gpus', 'processes', 'nvlink', 'xid'],
                                      default=['gpus', 'processes', 'nvlink', 'xid']),
                           timeout=dict(type='int', default=20),
                           monitoring_agents=dict(type='list', elements='str', default=[]),
                           from_log=dict(type='path'),
                           before_benchmark=dict(type='bool', default=False),
                           as_facts=dict(type='bool', default=True)),
        supports_check_mode=True,
    )
    root = module.params['root']
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory: give / or the path of an unpacked node snapshot' % root)
    if module.params['timeout'] < 1:
        module.fail_json(msg='timeout must be at least 1 second, not %d' % module.params['timeout'])
    sysroot = SysRoot(root)
    runner = _gpu_state.ToolRunner(module.params['timeout'])
    tool = module.get_bin_path('nvidia-smi', required=False)
    from_log = module.params['from_log']
    run = runner
    if from_log is not None:
        # Saved outputs, never the tool of this machine; none there: not read (read_gpu_state with no tool).
        tool = 'nvidia-smi' if os.path.isdir(from_log) and not os.path.lexists(os.path.join(from_log, _gpu_state.NOT_INSTALLED)) else None
        run = _gpu_state.saved_runner(from_log, _paths.read_regular)
    started = time.time()
    try:
        facts = _gpu_state.read_gpu_state(run, tool, sysroot, lambda: kernel_log(module, sysroot, root, runner, from_log),
                                          tuple(module.params['parts']))
    except _process.Terminated as exc:
        module.fail_json(msg='stopped while reading the GPUs\' state (%s); every tool it ran was reaped' % exc)
    if from_log is not None and tool is None and not os.path.lexists(os.path.join(from_log, _gpu_state.NOT_INSTALLED)):
        for part in module.params['parts']:
            if part != 'xid':
                facts['not_read'][part] = 'no saved outputs of nvidia-smi in %s' % from_log
    elif not tool:
        others = [name for name in OTHER_TOOLS if module.get_bin_path(name, required=False)]
        if others:
            facts['tool'] = others[0]
            for part in module.params['parts']:
                if part != 'xid':
                    facts['not_read'][part] = 'not read: parser for %s not available' % others[0]
    # What it cost, beside the facts (which stay the same for the same state: offline.yml compares them).
    cost = {'elapsed_ms': int(round((time.time() - started) * 1000)), 'timings': runner.timings}
    facts['root'] = root
    facts['before_benchmark'] = module.params['before_benchmark']
    facts['monitoring_agents'] = [name[:64] for name in module.params['monitoring_agents'][:64]]
    facts = without_surrogates(facts, sysroot.warn, 'gpu_fabric_gpu')
    for warning in sysroot.warnings:
        module.warn(warning)
    if module.params['as_facts']:
        module.exit_json(changed=False, ansible_facts={'gpu_fabric_gpu': facts}, **cost)
    module.exit_json(changed=False, gpu_fabric_gpu=facts, **cost)


if __name__ == '__main__':
    main()
