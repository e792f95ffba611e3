# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""SysRoot below a root that is someone else's files: every read stays below the root, is
bounded, and reads regular files only (docs/security.md). The live root / reads as before."""

from __future__ import annotations

import gzip
import json
import os
import platform
import subprocess
import sys

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr, _host
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
DESC = 'sys/devices/pci0000:00/0000:00:02.0/infiniband/mlx5_0/node_desc'


@pytest.fixture
def node(tmp_path):
    """A node root with sysfs' relative links, and a secret next to it (outside the root)."""
    root = tmp_path / 'root'
    device = root / 'sys/devices/pci0000:00/0000:00:02.0/infiniband/mlx5_0'
    device.mkdir(parents=True)
    (device / 'node_desc').write_text('gpu017 HCA-1\n')
    (root / 'sys/class/infiniband').mkdir(parents=True)
    os.symlink('../../devices/pci0000:00/0000:00:02.0/infiniband/mlx5_0', str(root / 'sys/class/infiniband/mlx5_0'))
    secret = tmp_path / 'secret'
    secret.write_text('SECRET-MARKER\n')
    return root, secret


def _replace(path, target):
    os.unlink(str(path))
    os.symlink(target, str(path))


def test_sysfs_relative_links_still_resolve(node):
    root, _secret = node
    sysroot = SysRoot(str(root))
    assert sysroot.text('/sys/class/infiniband/mlx5_0/node_desc') == 'gpu017 HCA-1'
    assert sysroot.resolve('/sys/class/infiniband/mlx5_0') == '/sys/devices/pci0000:00/0000:00:02.0/infiniband/mlx5_0'
    # An absolute target names a path of the node: re-rooted, as a snapshot may hold it.
    _replace(root / 'sys/class/infiniband/mlx5_0', '/sys/devices/pci0000:00/0000:00:02.0/infiniband/mlx5_0')
    assert SysRoot(str(root)).text('/sys/class/infiniband/mlx5_0/node_desc') == 'gpu017 HCA-1'
    assert sysroot.warnings == []


@pytest.mark.parametrize('how', ['absolute', 'relative', 'absolute directory'])
def test_a_link_out_of_the_root_never_reads_outside(node, how):
    root, secret = node
    if how == 'absolute':
        _replace(root / DESC, str(secret))
    elif how == 'relative':
        _replace(root / DESC, '../' * 20 + str(secret).lstrip('/'))
    else:
        _replace(root / 'sys/class/infiniband/mlx5_0', str(secret.parent))
    sysroot = SysRoot(str(root))
    rels = ['/sys/class/infiniband/mlx5_0/node_desc', '/sys/class/infiniband/mlx5_0/secret']
    for rel in rels + (['/' + DESC] if how != 'absolute directory' else []):
        assert sysroot.text(rel) is None
        assert sysroot.cached(rel) is None and sysroot.binary(rel) is None
        assert not sysroot.exists(rel)
    assert sysroot.listdir('/sys/class/infiniband/mlx5_0') in ([], ['node_desc'])


def test_dotdot_stops_at_the_root(node):
    root, secret = node
    sysroot = SysRoot(str(root))
    assert sysroot.resolve('/../../../..' + str(secret)) is None
    assert sysroot.text('/../../../..' + str(secret)) is None
    assert sysroot.resolve('/sys/../../../sys/class') == '/sys/class'


def _child(code, timeout=20):
    """Run code in a child with 768 MiB of address space: an unbounded read fails it, a
    blocking one times out - the test process itself is never at risk."""
    limit = 'import resource; resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20))\n'
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        done = subprocess.run([sys.executable, '-c', limit + code], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=REPO, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail('the read blocked for %d s' % timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


READ = '''
import json
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
s = SysRoot(%r)
print(json.dumps([s.cached('/proc/kallsyms') is None, s.text('/proc/kallsyms') is None, s.warnings]))
'''


def test_kallsyms_linked_to_dev_zero_is_not_read(tmp_path):
    (tmp_path / 'proc').mkdir()
    os.symlink('/dev/zero', str(tmp_path / 'proc/kallsyms'))
    cached_none, text_none, _warnings = _child(READ % str(tmp_path))
    assert cached_none and text_none


def test_a_fifo_is_refused_without_blocking(tmp_path):
    (tmp_path / 'proc').mkdir()
    os.mkfifo(str(tmp_path / 'proc/kallsyms'))
    cached_none, text_none, warnings = _child(READ % str(tmp_path))
    assert cached_none and text_none
    assert warnings == ['cannot read /proc/kallsyms: not a regular file']


def test_a_file_over_the_cap_is_refused_whole(tmp_path):
    (tmp_path / 'proc').mkdir()
    with open(str(tmp_path / 'proc/kallsyms'), 'wb') as handle:
        handle.truncate((64 << 20) + 1)      # sparse: nothing written to disk
    sysroot = SysRoot(str(tmp_path))
    assert sysroot.cached('/proc/kallsyms') is None
    assert sysroot.warnings == ['cannot read /proc/kallsyms: larger than the 64 MiB cap of a read']
    # One MiB of text() and binary()'s own size are bounds, not refusals.
    assert len(sysroot.text('/proc/kallsyms')) == 1 << 20 and len(sysroot.binary('/proc/kallsyms', 4096)) == 4096


@pytest.mark.parametrize('release', ['../../../evil', '5.15.0/../../../evil', '5.15.0\x00', 'a' * 65, '..'])
def test_a_kernel_release_that_is_a_path_chooses_no_file(tmp_path, release):
    (tmp_path / 'proc/sys/kernel').mkdir(parents=True)
    (tmp_path / 'proc/sys/kernel/osrelease').write_text(release + '\n')
    # Where '/usr/src/kernels/../../../evil/Module.symvers' leads, '/..' being '/'.
    (tmp_path / 'evil').mkdir()
    (tmp_path / 'evil/Module.symvers').write_text('0x1\tmm_kobj\tvmlinux\tEXPORT_SYMBOL\t\n')
    sysroot = SysRoot(str(tmp_path))
    kernel = _gdr.read_kernel(sysroot)
    assert kernel == {'release': None, 'mm_kobj_exported': None, 'mm_kobj_source': None}
    assert any('not a kernel release' in w for w in sysroot.warnings)
    assert _gdr.read_ofed(sysroot, kernel['release'])['config_header'] is None


def test_a_real_kernel_release_is_used(tmp_path):
    for release in ('5.15.0-105-generic', '5.14.0-427.13.1.el9_4.x86_64', '6.8.0+', platform.release()):
        (tmp_path / 'proc/sys/kernel').mkdir(parents=True, exist_ok=True)
        (tmp_path / 'proc/sys/kernel/osrelease').write_text(release + '\n')
        assert _gdr.read_kernel(SysRoot(str(tmp_path)))['release'] == release


def test_a_symvers_gz_that_expands_past_the_cap_is_not_judged(tmp_path):
    (tmp_path / 'proc/sys/kernel').mkdir(parents=True)
    (tmp_path / 'proc/sys/kernel/osrelease').write_text('6.1.0\n')
    (tmp_path / 'boot').mkdir()
    # 80 MiB of zeros in ~80 kB, then the line a parser would look for.
    (tmp_path / 'boot/symvers-6.1.0.gz').write_bytes(gzip.compress(b'\0' * (80 << 20) + b'\tmm_kobj\t', 1))
    sysroot = SysRoot(str(tmp_path))
    kernel = _gdr.read_kernel(sysroot)
    assert kernel['mm_kobj_source'] is None
    assert any('symvers-6.1.0.gz' in w and 'expands past' in w for w in sysroot.warnings)
    # Concatenated gzip members are read as gzip(1) reads them.
    (tmp_path / 'boot/symvers-6.1.0.gz').write_bytes(gzip.compress(b'0x1\tkobject_put\tvmlinux\tEXPORT_SYMBOL\t\n')
                                                     + gzip.compress(b'0x2\tmm_kobj\tvmlinux\tEXPORT_SYMBOL\t\n'))
    assert _gdr.read_kernel(SysRoot(str(tmp_path)))['mm_kobj_exported'] is True


def test_a_link_to_dev_null_masks_wherever_it_is_stored(tmp_path):
    (tmp_path / 'etc/modules-load.d').mkdir(parents=True)
    (tmp_path / 'usr/lib/modules-load.d').mkdir(parents=True)
    (tmp_path / 'usr/lib/modules-load.d/rdma.conf').write_text('ib_srp\n')
    (tmp_path / 'usr/lib/modules-load.d/peer.conf').write_text('nvidia_peermem\n')
    # As fabric_capture stores it, and as an unpacked snapshot holds it (re-rooted).
    os.symlink('/dev/null', str(tmp_path / 'etc/modules-load.d/rdma.conf'))
    os.symlink('../../dev/null', str(tmp_path / 'etc/modules-load.d/peer.conf'))
    sysroot = SysRoot(str(tmp_path))
    assert sysroot.link_target('/etc/modules-load.d/rdma.conf') == '/dev/null'
    assert sysroot.link_target('/etc/modules-load.d/peer.conf') == '/dev/null'
    assert sysroot.link_target('/usr/lib/modules-load.d/rdma.conf') is None
    assert _host._conf_files(sysroot, ('/etc/modules-load.d', '/usr/lib/modules-load.d')) == []


def test_the_live_root_reads_as_before():
    sysroot = SysRoot('/')
    # procfs files stat as 0 bytes, and are read all the same.
    assert os.stat('/proc/self/limits').st_size == 0
    assert 'Max locked memory' in sysroot.text('/proc/self/limits')
    assert sysroot.text('/proc/sys/kernel/osrelease') == platform.release()
    assert b'Name:' in sysroot.cached('/proc/self/status')
    assert sysroot.exists('/proc/self') and sysroot.isdir('/proc/self')
    assert sysroot.resolve('/proc/self') == '/proc/%d' % os.getpid()
    assert sysroot.text('/nonexistent/gpu_fabric') is None and sysroot.warnings == []
