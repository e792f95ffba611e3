#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: fabric_capture
short_description: Snapshot of the files the fabric facts read on a node, for offline analysis
version_added: 0.1.0
description:
  - Runs the readers of M(hpc.gpu_fabric.ib_link_facts), M(hpc.gpu_fabric.gdr_facts) and
    M(hpc.gpu_fabric.roce_qos_facts) on the node, notes every
    file, directory listing and symlink they read below O(root), and packs exactly those into a gzip'ed tar at
    O(dest) whose members are paths relative to the node root. Unpacked anywhere, the tree gives the same facts
    when the facts modules read it with O(root) pointing at it (playbook C(hpc.gpu_fabric.offline)).
  - Files are stored with the bytes the readers got, not the size C(stat) reports (sysfs attributes stat as
    4096 bytes, C(/proc) files as 0). Symlinks such as C(/sys/class/infiniband/mlx5_0) are stored as symlinks
    with their target; an absolute target is made relative to the node root.
  - A file that cannot be read (permission, C(EINVAL)) is left out and listed in RV(skipped). Extended PCI
    config space (ACS) is readable by root only; without root the snapshot holds what a user sees, as the
    facts modules do.
  - An entry of a listed directory that no reader opened is stored as an empty file of that name, so that the
    listing is the same; RV(placeholders) counts them.
  - The tarball also holds C(.gpu_fabric_capture.json) at its top - when, from which root, with which readers,
    and everything this module returns - which no reader reads.
  - The DCB settings of a RoCE port (trust, PFC, DSCP map, ETS) are not files; they are asked from the NIC by
    C(mlnx_qos -i IF), else iproute2's C(dcb ... show dev IF), as M(hpc.gpu_fabric.roce_qos_facts) asks them
    (O(qos_tools) says when). Each of those read-only commands runs with an argument list and O(timeout), and
    its stdout is saved with the command and its rc as C(.gpu_fabric_commands/roce_qos/<netdev>.<kind>.txt)
    in the tarball (C(kind) C(mlnx_qos), C(dcb_pfc), C(dcb_app), C(dcb_ets), C(dcb_apptrust)), where the
    C(from_log) option of M(hpc.gpu_fabric.roce_qos_facts) reads them (playbook C(hpc.gpu_fabric.offline) does).
    A tool that is not installed is saved as such and never fails the capture;
    a port whose DCB settings could not be read is a warning. A tool that timed out is not run again for the
    other ports. The ECN, CNP and RDMA CM ToS files are captured as files.
  - Spawns no other tool than those (C(mlnx_qos), C(dcb), C(nvidia-smi)); reads only. The warnings of the readers (for example an unreadable file) come back as
    warnings, as the facts modules give them.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hpc.gpu_fabric.root
attributes:
  check_mode:
    support: full
    details: In check mode the readers run and everything is counted; no file is written.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  dest:
    description:
      - Path of the tarball on the node (conventionally ending in C(.tar.gz)). Its directory must exist.
        It is written atomically; an existing file is replaced and keeps its owner and mode. An existing
        O(dest) that is no regular file (a device such as C(/dev/null), a FIFO, a socket, a directory, or a
        symlink to one) is refused and left as it is.
    type: path
    required: true
  readers:
    description:
      - Which facts to capture the files of - C(ib) (M(hpc.gpu_fabric.ib_link_facts)), C(gdr)
        (M(hpc.gpu_fabric.gdr_facts)), C(roce) (M(hpc.gpu_fabric.roce_qos_facts), with the DCB tools' outputs).
    type: list
    elements: str
    choices: [ib, gdr, roce]
    default: [ib, gdr, roce]
  qos_tools:
    description:
      - When to run C(mlnx_qos) / C(dcb) for the RoCE ports' DCB settings, as in M(hpc.gpu_fabric.roce_qos_facts)
        - C(auto) only when O(root) is C(/), C(always) also below another root (a simulated node whose stand-ins
        act on it), C(never) not at all (the snapshot then holds no DCB settings and its RoCE ports are unchecked
        offline).
    type: str
    choices: [auto, always, never]
    default: auto
  gpu_tools:
    description:
      - When to save the GPUs' own state for M(hpc.gpu_fabric.gpu_state_facts) - the outputs of its C(nvidia-smi) calls
        (C(--query-gpu), C(--query-compute-apps), C(nvlink -s), C(nvlink -e)) and the lines of the kernel log the GPU
        driver wrote (C(NVRM), nothing else of the node's messages), below C(.gpu_fabric_commands/gpu_state) in the
        tarball, where its C(from_log) option reads them offline.
      - C(auto) only when O(root) is C(/), C(always) also below another root (a simulated node), C(never) not at all
        (offline, the GPU state is then said not read).
    type: str
    choices: [auto, always, never]
    default: auto
  timeout:
    description: Seconds each run of C(mlnx_qos) / C(dcb) / C(nvidia-smi) may take.
    type: int
    default: 20
  fabric_outputs:
    description:
      - A directory where M(hpc.gpu_fabric.ib_fabric_facts) saved the fabric tools' outputs (its C(save_to)). The files
        of the names its C(from_log) reads (C(not_read.txt) among them, where the fabric could not be read) are packed as
        C(.gpu_fabric_commands/ib_fabric/<name>), where the playbook C(hpc.gpu_fabric.offline) reads them back.
        Regular files only, each up to 64 MiB; another is left out and listed in RV(skipped).
    type: path
notes:
  - Modes and owners of the node's files are not kept (directories are stored 0755, files 0644), so that the
    unpacked tree can be removed by the user who unpacked it.
seealso:
  - module: hpc.gpu_fabric.ib_link_facts
  - module: hpc.gpu_fabric.gdr_facts
  - module: hpc.gpu_fabric.roce_qos_facts
'''

EXAMPLES = r'''
- name: Snapshot this node's fabric state
  hpc.gpu_fabric.fabric_capture:
    dest: /tmp/gpu017.tar.gz
  become: true

- name: Only the InfiniBand side, to see how large it would be
  hpc.gpu_fabric.fabric_capture:
    dest: /tmp/gpu017-ib.tar.gz
    readers: [ib]
  check_mode: true
  register: size

- name: Analyse the unpacked snapshot anywhere
  hpc.gpu_fabric.gdr_facts:
    root: /srv/snapshots/gpu017/root
  delegate_to: localhost
'''

RETURN = r'''
dest:
  description: The tarball's path (not written in check mode).
  returned: always
  type: str
  sample: /tmp/ansible.x1y2z3.tar.gz
files:
  description: Regular files in the tarball (placeholders included), not counting the manifest.
  returned: always
  type: int
  sample: 8431
links:
  description: Symlinks in the tarball.
  returned: always
  type: int
  sample: 212
directories:
  description: Directories in the tarball.
  returned: always
  type: int
  sample: 1530
placeholders:
  description: Files stored empty because the readers only listed or tested them.
  returned: always
  type: int
  sample: 40
bytes:
  description: Content bytes of the files, uncompressed.
  returned: always
  type: int
  sample: 1182630
archive_bytes:
  description: Size of the tarball written; null in check mode.
  returned: always
  type: int
  sample: 98304
skipped:
  description: Files the readers could not read (left out of the tarball), each with C(path) and C(reason).
  returned: always
  type: list
  elements: dict
  sample: [{path: "/sys/devices/pci0000:00/0000:00:01.0/config", reason: Permission denied}]
root:
  description: The root the readers read below.
  returned: always
  type: str
  sample: /
fabric_outputs:
  description: The fabric tools' outputs packed from O(fabric_outputs), as members of the tarball.
  returned: always
  type: list
  elements: str
  sample: [.gpu_fabric_commands/ib_fabric/iblinkinfo.txt]
commands:
  description:
    - The DCB reads run on the node, each with C(command), the C(file) its output is saved as in the tarball,
      C(rc) (null when the tool is not installed) and C(error) (C(not installed), C(timed out (or rc 124)),
      C(not run ...), or null).
  returned: always
  type: list
  elements: dict
  sample: [{command: mlnx_qos -i ens10f0np0, file: .gpu_fabric_commands/roce_qos/ens10f0np0.mlnx_qos.txt, rc: 0, error: null}]
'''

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _capture, _gpu_state, _paths, _process
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._roce import tool_runner


def capture_gpu(module, root, timeout):
    """The GPU state's saved outputs as tar members, and what was run: gpu_state_facts' own calls of
    nvidia-smi (module_utils/_gpu_state.py read_gpu_state, each with ``timeout``), and the NVRM lines of the
    kernel log (/dev/kmsg on the node, dev/kmsg below another root)."""
    saved, commands = {}, []
    tool = module.get_bin_path('nvidia-smi', required=False)

    def answered(argv, out, why):
        name = _gpu_state.saved_name(argv[1:])
        if name:
            # A field the driver refused: the answer to the next, smaller call replaces it.
            saved[name] = _gpu_state.saved_text(out, why)
        commands.append({'command': ' '.join(['nvidia-smi'] + list(argv[1:]))[:300],
                         'file': '%s/%s' % (_gpu_state.SAVED_DIR, name) if name else None, 'rc': None if why else 0, 'error': why})
    run = _gpu_state.ToolRunner(timeout, answered)
    if tool:
        _gpu_state.read_gpu_state(run, tool, SysRoot(root), lambda: ('', None), ('gpus', 'processes', 'nvlink'))
    else:
        saved[_gpu_state.NOT_INSTALLED] = ''
        commands.append({'command': 'nvidia-smi', 'file': '%s/%s' % (_gpu_state.SAVED_DIR, _gpu_state.NOT_INSTALLED), 'rc': None,
                         'error': 'not installed'})
    try:
        log = _gpu_state.read_kmsg() if root == '/' else SysRoot(root).text('dev/kmsg', quiet=True)
    except OSError as exc:
        log = None
        commands.append({'command': 'read /dev/kmsg', 'file': None, 'rc': None, 'error': exc.strerror or str(exc)})
    if log is not None:
        saved['kmsg.txt'] = _gpu_state.kernel_nvrm_lines(log)
    members = {}
    for name, text in saved.items():
        data = text.encode('utf-8', 'surrogateescape')
        members['%s/%s' % (_gpu_state.SAVED_DIR, name)] = {'kind': 'file', 'data': data, 'placeholder': False}
    if members:
        parts = _gpu_state.SAVED_DIR.split('/')
        for index in range(1, len(parts) + 1):
            members['/'.join(parts[:index])] = {'kind': 'dir'}
    return members, commands


def _checked_paths(module, root, dest):
    """The directory dest is written in, once root and dest are known to be usable (else fail_json)."""
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory: give / or the path of a node tree' % root)
    # dest names the tarball: '' (abspath makes it the working directory), a path ending in '/'
    # or an existing directory is no file name, and atomic_move would fail only after the
    # whole capture was written to a temporary file.
    if not dest or dest.endswith('/') or os.path.basename(dest) in ('', '.', '..') or os.path.isdir(dest):
        module.fail_json(msg='dest must be the path of the tarball to write (such as /tmp/node1.tar.gz), got %r' % dest)
    directory = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(directory):
        module.fail_json(msg='the directory of dest (%s) does not exist' % directory)
    # The tarball is renamed over dest: over /dev/null, a FIFO or a socket that would replace the
    # device or pipe itself with a plain file (as root, /dev/null stayed a file until restored).
    problem = _paths.destination_problem(dest)
    if problem:
        module.fail_json(msg='dest %s %s; give the path of the tarball to write' % (dest, problem))
    if module.params['timeout'] < 1:
        module.fail_json(msg='timeout must be at least 1 second')
    return directory


def _add_gpu_outputs(module, root, members, notes):
    """nvidia-smi's outputs for gpu_state_facts from_log offline, into members (as qos_tools: auto runs it on / only)."""
    gpu_tools = module.params['gpu_tools']
    if gpu_tools == 'always' or (gpu_tools == 'auto' and root == '/'):
        try:
            gpu_members, gpu_commands = capture_gpu(module, root, module.params['timeout'])
        except _process.Terminated as exc:
            module.fail_json(msg='stopped while nvidia-smi ran (%s); all of them were reaped' % exc)
        members.update(gpu_members)
        notes['commands'].extend(gpu_commands)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', default='/'),
            dest=dict(type='path', required=True),
            readers=dict(type='list', elements='str', choices=sorted(_capture.READERS), default=['ib', 'gdr', 'roce']),
            qos_tools=dict(type='str', choices=['auto', 'always', 'never'], default='auto'),
            gpu_tools=dict(type='str', choices=['auto', 'always', 'never'], default='auto'),
            timeout=dict(type='int', default=20),
            fabric_outputs=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    root, dest = module.params['root'], module.params['dest']
    readers = list(dict.fromkeys(module.params['readers']))
    directory = _checked_paths(module, root, dest)
    fabric_outputs = module.params['fabric_outputs']
    if fabric_outputs is not None and not os.path.isdir(fabric_outputs):
        module.fail_json(msg='fabric_outputs %s is not a directory (ib_fabric_facts save_to)' % fabric_outputs)

    tools = module.params['qos_tools']
    run = None
    if 'roce' in readers and (tools == 'always' or (tools == 'auto' and root == '/')):
        run = tool_runner(module.get_bin_path, module.params['timeout'])
    try:
        _facts, members, notes, warnings = _capture.capture(root, readers, run)
    except _process.Terminated as exc:
        module.fail_json(msg='stopped while mlnx_qos / dcb ran (%s); all of them were reaped' % exc)
    _add_gpu_outputs(module, root, members, notes)
    saved, skipped = _capture.fabric_members(fabric_outputs) if fabric_outputs is not None else ({}, [])
    members.update(saved)
    notes['skipped'].extend(skipped)
    notes['fabric_outputs'] = sorted(name for name, member in saved.items() if member['kind'] == 'file')
    counts = _capture.summary(members)
    meta = _capture.manifest(root, readers, members, notes, warnings)
    result = dict(changed=True, dest=dest, root=root, archive_bytes=None, skipped=notes['skipped'],
                  commands=notes['commands'], fabric_outputs=notes['fabric_outputs'], **counts)
    if not module.check_mode:
        fd, tmp = tempfile.mkstemp(prefix='.fabric_capture.', suffix='.tar.gz', dir=directory)
        try:
            try:
                with os.fdopen(fd, 'wb') as handle:
                    _capture.write_tar(handle, members, meta)
                # Again right before the rename: the capture takes seconds, dest may have appeared.
                problem = _paths.destination_problem(dest)
                if problem:
                    module.fail_json(msg='dest %s %s; give the path of the tarball to write' % (dest, problem))
                module.atomic_move(tmp, dest)
            except (IOError, OSError) as exc:
                module.fail_json(msg='cannot write %s: %s' % (dest, to_native(exc)))
        finally:
            # Every way out but a completed move leaves the temporary file behind otherwise:
            # atomic_move and fail_json leave through SystemExit, a bug through any exception.
            if os.path.lexists(tmp):
                os.unlink(tmp)
        result['archive_bytes'] = os.path.getsize(dest)
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
