# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""mlnx-ofed-rebuild stand-in: rebuild OFED on the simulated node at $GF_SIM_ROOT.

Like the real configure (compat/config/rdma.m4 LB_CHECK_SYMBOL_EXPORT), the rebuild
defines HAVE_MM_KOBJ_EXPORTED only when the kernel's Module.symvers exports mm_kobj;
then ib_core creates /sys/kernel/mm/memory_peers/<client> for every loaded GPU driver
that registers one (metax -> mxcd, amdgpu -> amdkfd, nvidia_peermem -> nv_mem).
"""

from __future__ import annotations

import glob
import os
import sys

CLIENTS = {'metax': 'mxcd', 'amdgpu': 'amdkfd', 'nvidia_peermem': 'nv_mem'}


def main():
    root = os.environ.get('GF_SIM_ROOT')
    if not root or not os.path.isdir(root):
        sys.stderr.write('mlnx-ofed-rebuild: GF_SIM_ROOT is not a simulated node root\n')
        return 2
    with open(os.path.join(root, 'proc/sys/kernel/osrelease')) as handle:
        release = handle.read().strip()
    headers = glob.glob(os.path.join(root, 'usr/src/ofa_kernel/*', release, 'compat/config.h'))
    if not headers:
        sys.stderr.write('mlnx-ofed-rebuild: no OFED sources for kernel %s\n' % release)
        return 1
    symvers = os.path.join(root, 'usr/src/kernels', release, 'Module.symvers')
    if not os.path.exists(symvers):
        sys.stderr.write('Error: kernel headers for %s are not installed\n' % release)
        return 1
    with open(symvers) as handle:
        exported = any(line.split('\t')[1:2] == ['mm_kobj'] for line in handle)
    define = '#define HAVE_MM_KOBJ_EXPORTED 1' if exported else '/* #undef HAVE_MM_KOBJ_EXPORTED */'
    for header in headers:
        with open(header) as handle:
            lines = [line for line in handle.read().splitlines() if 'HAVE_MM_KOBJ_EXPORTED' not in line]
        with open(header, 'w') as handle:
            handle.write('\n'.join(lines + [define]) + '\n')
    print('Building mlnx-ofa_kernel for %s ... done (HAVE_MM_KOBJ_EXPORTED %s)' % (release, 'yes' if exported else 'no'))
    if exported:
        with open(os.path.join(root, 'proc/modules')) as handle:
            loaded = set(line.split()[0] for line in handle if line.strip())
        for module, client in CLIENTS.items():
            if module in loaded:
                path = os.path.join(root, 'sys/kernel/mm/memory_peers', client)
                os.makedirs(path, exist_ok=True)
                with open(os.path.join(path, 'version'), 'w') as handle:
                    handle.write('1.0\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
