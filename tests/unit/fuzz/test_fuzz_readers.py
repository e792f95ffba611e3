# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fuzzing the sysfs/proc readers (read_ib, read_gdr, read_host through a SysRoot) over small
random roots: no root makes one raise, none takes a second, and the facts modules' output
is valid UTF-8 whatever the names in the tree.

Each root is a random part of two simulated nodes' trees (tests/sim profiles homelab_cx4 and
metax_c500_cx7: sysfs, procfs, /etc, Module.symvers), files damaged by _mutate.mutate,
files replaced by directories and directories by files, entries with non-UTF-8 names, FIFOs,
symlink loops and links out of the root. A reader may warn; it may not raise.

Figures (this 2-core machine): 3,400 roots, each read by all three readers (10,200 reads of
roots of 20 to 150 files, about a third of them damaged), 38 s on tmpfs; the slowest root
took 0.008 s for all three readers. Plus 150 hypothesis roots of up to 12 files of random
bytes at the paths the readers look at. Found with it and fixed: a non-UTF-8 name went into
the facts as a lone surrogate (not writable as UTF-8); a hex sysfs value of thousands of
digits became an int that JSON cannot write (str() digit limit); a NUL or '../' read from
gid_attrs/ndevs was used as a /sys/class/net path (ValueError: embedded null byte).
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr, _host, _ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import without_surrogates
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.sim import render
from tests.unit.fuzz import _mutate

ROOTS = 3400
DEADLINE_S = 1.0
_NAMES = (b'mlx5_\xff', b'\xc3(', b'cpu\xfe', b'x.conf\xff', b'0000:0\xff:00.0')


# Directories the readers list, where a name is a device, a port, a file to read.
_LISTED = ('sys/class/infiniband', 'sys/bus/pci/devices', 'sys/class/net', 'sys/devices/system/cpu', 'sys/class/iommu',
           'etc/security/limits.d', 'etc/modules-load.d', 'sys/kernel/mm/memory_peers')


def _readers(sysroot):
    return {'ib': _ib.read_ib(sysroot), 'gdr': _gdr.read_gdr(sysroot, _ib.list_rdma_devices(sysroot)),
            'host': _host.read_host(sysroot)}


@pytest.fixture(scope='module')
def vocabulary(tmp_path_factory):
    """[(path relative to the root, 'link' or 'file', target or content)] of two simulated nodes,
    GID tables cut to four entries (the rest are the same, and they are most of the tree)."""
    entries = {}
    for profile in ('homelab_cx4', 'metax_c500_cx7'):
        root = str(tmp_path_factory.mktemp(profile))
        render.render(copy.deepcopy(render.load_profile(profile)), root)
        for top, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(top, name)
                rel = os.path.relpath(path, root)
                parts = rel.split('/')
                if any(part.isdigit() and int(part) >= 4 and parent in ('gids', 'types', 'ndevs')
                       for parent, part in zip(parts, parts[1:])):
                    continue
                if os.path.islink(path):
                    entries[rel] = ('link', os.readlink(path))
                elif os.path.isfile(path):
                    with open(path, 'rb') as handle:
                        entries[rel] = ('file', handle.read(1 << 16))
    return sorted((rel, kind, value) for rel, (kind, value) in entries.items())


def _build(rng, root, vocabulary):
    """A random root: part of the vocabulary, damaged."""
    keep = rng.uniform(0.03, 0.25)
    dirs = []
    made = set()
    for rel, kind, value in vocabulary:
        if rng.random() > (0.6 if kind == 'link' else keep):
            continue
        path = os.path.join(root, rel)
        parent = os.path.dirname(path)
        if parent not in made:
            try:
                os.makedirs(parent, exist_ok=True)
            except OSError:  # a file or a dangling link made on the way
                continue
            made.add(parent)
        if os.path.lexists(path):
            continue
        if kind == 'link':
            os.symlink(value, path)
            continue
        roll = rng.random()
        if roll < 0.04:
            os.makedirs(path)                              # a directory where a file is expected
            dirs.append(path)
            continue
        if roll < 0.05:
            os.mkfifo(path)                                # a FIFO: refused, never waited on
            continue
        if roll < 0.07:
            os.symlink(rng.choice(('/etc/passwd', '../' * 12 + 'etc/shadow', rel.split('/')[-1])), path)
            continue
        with open(path, 'wb') as handle:
            handle.write(_mutate.mutate(rng, value) if roll < 0.4 else value)
        dirs.append(os.path.dirname(path))
    listed = [os.path.join(root, rel) for rel in _LISTED if os.path.isdir(os.path.join(root, rel))]
    for _extra in range(rng.randrange(4)):             # non-UTF-8 names next to real entries
        if dirs or listed:
            where = rng.choice(dirs + listed * 3).encode()
            name = os.path.join(where, rng.choice(_NAMES))
            if os.path.lexists(name):
                continue
            if rng.random() < 0.5:
                os.makedirs(os.path.join(name, b'ports', b'1'))
            else:
                with open(name, 'wb') as handle:
                    handle.write(b'4: ACTIVE\n')
    if dirs and rng.random() < 0.1:                    # a directory where a directory is expected, as a file
        victim = rng.choice(dirs)
        if os.path.isdir(victim) and not os.path.islink(victim):
            shutil.rmtree(victim)
            with open(victim, 'wb') as handle:
                handle.write(b'\xff' * rng.randrange(10))


def _strict_utf8(facts):
    json.dumps(facts, ensure_ascii=False).encode('utf-8')


@pytest.fixture
def scratch(tmp_path):
    """Where the roots are built: tmpfs when there is one (building 1,500 trees of small files
    on a disk-backed /tmp costs ten times as much), else pytest's tmp_path."""
    if os.path.isdir('/dev/shm') and os.access('/dev/shm', os.W_OK):
        path = tempfile.mkdtemp(prefix='gf-fuzz-', dir='/dev/shm')
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)


def test_readers_survive_random_roots(scratch, vocabulary):
    rng = random.Random(11)
    clock = _mutate.Clock(DEADLINE_S)
    for index in range(ROOTS):
        root = os.path.join(scratch, str(index))
        os.makedirs(root)
        _build(rng, root, vocabulary)
        sysroot = SysRoot(root)
        try:
            facts = clock.run(_readers, sysroot, about='root %d (kept in %s)' % (index, root))
            warnings = []
            _strict_utf8(without_surrogates(facts, warnings.append))
        except Exception as exc:
            pytest.fail('root %d (kept in %s) made a reader raise %r' % (index, root, exc))
        shutil.rmtree(root)
    assert clock.count == ROOTS
    assert clock.slowest[0] < DEADLINE_S


_PATHS = ('sys/class/infiniband/mlx5_0/ports/1/state', 'sys/class/infiniband/mlx5_0/ports/1/rate',
          'sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error', 'sys/class/infiniband/mlx5_0/ports/1/gids/0',
          'sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0', 'sys/class/net/eth0/mtu', 'sys/class/net/eth0/address',
          'sys/bus/pci/devices/0000:01:00.0/class', 'sys/bus/pci/devices/0000:01:00.0/vendor',
          'sys/bus/pci/devices/0000:01:00.0/config', 'sys/bus/pci/devices/0000:01:00.0/current_link_speed',
          'sys/bus/pci/devices/0000:01:00.0/max_link_width', 'sys/bus/pci/devices/0000:01:00.0/iommu_group/type',
          'proc/modules', 'proc/sys/kernel/osrelease', 'proc/kallsyms',
          'proc/self/limits', 'proc/self/status', 'proc/net/route', 'proc/cmdline', 'etc/security/limits.conf',
          'etc/security/limits.d/90-rdma.conf', 'etc/systemd/system.conf', 'etc/modules-load.d/rdma.conf',
          'etc/modules', 'sys/devices/system/cpu/cpu0/cpufreq/scaling_governor', 'sys/kernel/mm/memory_peers/nv_mem/version')


@settings(max_examples=150, derandomize=True, database=None, deadline=1000)
@given(st.dictionaries(st.sampled_from(_PATHS), st.binary(max_size=200) | st.none(), max_size=12))
def test_readers_survive_any_small_root(tmp_path_factory, files):
    """Files of random bytes at the places the readers look (None: a directory there)."""
    root = str(tmp_path_factory.mktemp('root'))
    for rel, content in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if content is None:
            os.makedirs(path, exist_ok=True)
        elif not os.path.isdir(path):
            with open(path, 'wb') as handle:
                handle.write(content)
    facts = _readers(SysRoot(root))
    _strict_utf8(without_surrogates(facts, lambda msg: None))
    shutil.rmtree(root)
