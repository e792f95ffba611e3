# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""modprobe stand-in: load and unload modules on the simulated node at $GF_SIM_ROOT.

Called by tests/sim/bin/modprobe. Arguments, messages and exit codes are kmod's:

  modprobe [-n] [-v] [-q] NAME [PARAM=VALUE...]   load NAME and the modules it depends on
  modprobe -a [-n] [-v] [-q] NAME...              load every NAME
  modprobe -r [-n] [-v] [-q] NAME...              unload every NAME

As with kmod, words after NAME are parameters of NAME unless -a is given: the seed-002
command 'modprobe ib_ipoib ib_umad ib_uverbs nvidia-peermem' loads ib_ipoib only.
'-' and '_' are the same in names. -n (--dry-run) resolves and prints, inserts nothing.

A module exists when the node's lib/modules/<release>/modules.dep names it, or, as long
as the renderer writes none, when it is loaded or in KNOWN (out-of-tree GPU drivers only
where they are installed). Loading adds a /proc/modules line; the kernel's side effects
that the facts read are modelled for nvidia_peermem: its init returns -EINVAL without
MLNX OFED's peer-memory API (NVIDIA open-gpu-kernel-modules,
kernel-open/nvidia-peermem/nvidia-peermem.c nv_mem_client_init), /sys/module/nvidia_peermem/version
is its MODULE_VERSION, and ib_core lists the nv_mem client under
/sys/kernel/mm/memory_peers only when OFED was built with HAVE_MM_KOBJ_EXPORTED.
"""

from __future__ import annotations

import getopt
import glob
import os
import re
import shutil
import sys

# Modules of the RDMA stack and GPU drivers a node has on disk (in-tree or MLNX OFED).
KNOWN = frozenset((
    'ib_core', 'ib_cm', 'iw_cm', 'rdma_cm', 'rdma_ucm', 'ib_uverbs', 'ib_umad', 'ib_ipoib',
    'ib_iser', 'ib_isert', 'ib_srp', 'ib_srpt', 'rpcrdma', 'mlx5_core', 'mlx5_ib', 'mlx4_core',
    'mlx4_ib', 'mlxfw', 'irdma', 'bnxt_re', 'efa', 'amdgpu',
))
# Out-of-tree drivers: on disk only where they were installed.
NVIDIA = frozenset(('nvidia', 'nvidia_uvm', 'nvidia_modeset', 'nvidia_drm', 'nvidia_peermem'))
OFED_ONLY = frozenset(('mlx_compat',))
# modules.dep of a stock kernel, in the order modprobe inserts them (dependencies first).
DEPENDS = {
    'ib_cm': ('ib_core',),
    'iw_cm': ('ib_core',),
    'rdma_cm': ('ib_core', 'ib_cm', 'iw_cm'),
    'rdma_ucm': ('ib_core', 'ib_cm', 'iw_cm', 'rdma_cm', 'ib_uverbs'),
    'ib_uverbs': ('ib_core',),
    'ib_umad': ('ib_core',),
    'ib_ipoib': ('ib_core', 'ib_cm'),
    'mlx5_ib': ('mlx5_core', 'ib_core', 'ib_uverbs'),
    'nvidia_uvm': ('nvidia',),
    'nvidia_modeset': ('nvidia',),
    'nvidia_drm': ('nvidia', 'nvidia_modeset'),
    'nvidia_peermem': ('nvidia', 'ib_core'),
}
# What a module's init returns (as strerror) when it cannot run on this node.
EINVAL = 'Invalid argument'
# compat/config.h of mlnx-ofa_kernel (compat/config/rdma.m4), as plugins/module_utils/_gdr.py reads it.
HAVE_MM_KOBJ_RE = re.compile(r'^\s*#\s*define\s+HAVE_MM_KOBJ_EXPORTED\b', re.M)
NVRM_VERSION_RE = re.compile(r'Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)')


class Node:
    """The simulated node: its root, kernel release and /proc/modules."""

    def __init__(self, root):
        self.root = root
        self.release = (self.read('/proc/sys/kernel/osrelease') or '').strip()

    def path(self, rel):
        return os.path.join(self.root, rel.lstrip('/'))

    def read(self, rel):
        try:
            with open(self.path(rel)) as handle:
                return handle.read()
        except (IOError, OSError):
            return None

    def write(self, rel, text):
        path = self.path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as handle:
            handle.write(text)

    def loaded(self):
        return [line.split()[0] for line in (self.read('/proc/modules') or '').splitlines() if line.strip()]

    def available(self):
        dep = self.read('/lib/modules/%s/modules.dep' % self.release)
        if dep is not None:
            # 'kernel/drivers/infiniband/core/ib_core.ko: ...' (modules.dep(5)).
            return set(os.path.basename(line.split(':')[0])[:-3].replace('-', '_') for line in dep.splitlines() if ':' in line)
        names = set(KNOWN) | set(self.loaded())
        if self.read('/proc/driver/nvidia/version') is not None:
            names |= NVIDIA
        if os.path.exists(self.path('/usr/bin/ofed_info')):
            names |= OFED_ONLY
        return names

    def ofed_mm_kobj(self):
        """Was the node's OFED built for this kernel with HAVE_MM_KOBJ_EXPORTED?"""
        for header in glob.glob(self.path('/usr/src/ofa_kernel/*/%s/compat/config.h' % self.release)):
            with open(header) as handle:
                if HAVE_MM_KOBJ_RE.search(handle.read()):
                    return True
        return False

    def init(self, name):
        """Run the module's init: None, or the error it returns (as strerror)."""
        if name == 'nvidia_peermem':
            if not os.path.exists(self.path('/usr/bin/ofed_info')):
                return EINVAL
            version = NVRM_VERSION_RE.search(self.read('/proc/driver/nvidia/version') or '')
            version = version.group(1) if version else '1.0'
            self.write('/sys/module/nvidia_peermem/version', version + '\n')
            if self.ofed_mm_kobj():
                self.write('/sys/kernel/mm/memory_peers/nv_mem/version', version + '\n')
                self.write('/sys/kernel/mm/memory_peers/nv_mem/num_alloc_mrs', '0\n')
        return None

    def insert(self, name):
        # The kernel adds a module at the head of its list (kernel/module/main.c
        # list_add_rcu(&mod->list, &modules)): /proc/modules shows the newest first.
        line = '%s 65536 0 - Live 0x0000000000000000\n' % name
        self.write('/proc/modules', line + (self.read('/proc/modules') or ''))

    def remove(self, name):
        lines = (self.read('/proc/modules') or '').splitlines(True)
        self.write('/proc/modules', ''.join(line for line in lines if line.split()[:1] != [name]))
        shutil.rmtree(self.path('/sys/module/' + name), ignore_errors=True)
        if name == 'nvidia_peermem':
            for client in ('nv_mem', 'nv_mem_nc'):
                shutil.rmtree(self.path('/sys/kernel/mm/memory_peers/' + client), ignore_errors=True)


def fatal(text):
    sys.stderr.write('modprobe: FATAL: %s\n' % text)
    return 1


def load(node, given, dry_run, verbose, quiet):
    name = given.replace('-', '_')
    if name not in node.available():
        return 1 if quiet else fatal('Module %s not found in directory /lib/modules/%s' % (given, node.release))
    for module in DEPENDS.get(name, ()) + (name,):
        if module in node.loaded():
            continue
        if verbose:
            print('insmod /lib/modules/%s/kernel/%s.ko' % (node.release, module))
        if dry_run:
            continue
        error = node.init(module)
        if error:
            sys.stderr.write("modprobe: ERROR: could not insert '%s': %s\n" % (module, error))
            return 1
        node.insert(module)
    return 0


def unload(node, given, dry_run, verbose):
    name = given.replace('-', '_')
    loaded = node.loaded()
    if name not in loaded:
        return fatal('Module %s is not in kernel.' % name)
    users = [mod for mod in loaded if name in DEPENDS.get(mod, ())]
    if users:
        return fatal('Module %s is in use.' % name)
    if verbose:
        print('rmmod %s' % name)
    if not dry_run:
        node.remove(name)
    return 0


def main(argv):
    root = os.environ.get('GF_SIM_ROOT')
    if not root or not os.path.isdir(root):
        return fatal('GF_SIM_ROOT is not the root of a simulated node (tests/sim); this stand-in acts on nothing else')
    try:
        opts, args = getopt.gnu_getopt(argv, 'anqrv', ['all', 'dry-run', 'show', 'quiet', 'remove', 'verbose'])
    except getopt.GetoptError as exc:
        # glibc getopt's words for a bad option.
        bad = ("unrecognized option '--%s'" % exc.opt) if len(exc.opt) > 1 else ("invalid option -- '%s'" % exc.opt)
        sys.stderr.write('modprobe: %s\n' % bad)
        return 1
    flags = set(pair[0] for pair in opts)
    dry_run = bool(flags & {'-n', '--dry-run', '--show'})
    verbose = bool(flags & {'-v', '--verbose'})
    quiet = bool(flags & {'-q', '--quiet'})
    if not args:
        sys.stderr.write('modprobe: ERROR: missing parameters. See -h.\n')
        return 1
    node = Node(root)
    if flags & {'-r', '--remove'}:
        return max(unload(node, name, dry_run, verbose) for name in args)
    # Without -a the words after the name are its parameters; the kernel ignores the ones it
    # does not know ('ib_ipoib: unknown parameter 'ib_umad' ignored' in the kernel log).
    names = args if flags & {'-a', '--all'} else args[:1]
    status = 0
    for name in names:
        status = max(status, load(node, name, dry_run, verbose, quiet))
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
