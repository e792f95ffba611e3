# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Writes below a snapshot or simulated root (issue 25 item 1): the sysfs and configfs files that
roce_qos and acs_disable write are opened without following a symlink and only when they are
regular files, so nothing outside the root is written and a FIFO does not block."""

from __future__ import annotations

import os
import stat
import struct

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths, _pci, _roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot

ECN = '/sys/class/net/eth0/ecn/roce_np/enable/3'


def _root(tmp_path):
    root = tmp_path / 'root'
    (root / 'sys/class/net/eth0/ecn/roce_np/enable').mkdir(parents=True)
    outside = tmp_path / 'outside'
    outside.write_text('0\n')
    return str(root), str(outside)


def test_a_regular_file_is_written_and_truncated(tmp_path):
    root, _outside = _root(tmp_path)
    with open(root + ECN, 'w') as handle:
        handle.write('106\n')
    assert _roce._write_text(SysRoot(root), ECN, '1') is None
    assert open(root + ECN).read() == '1\n'


def test_a_missing_file_below_a_simulated_root_is_made(tmp_path):
    root, _outside = _root(tmp_path)
    assert _roce._write_text(SysRoot(root), ECN, '1') is None
    assert open(root + ECN).read() == '1\n'


def test_a_symlink_out_of_the_root_is_not_written_through(tmp_path):
    root, outside = _root(tmp_path)
    os.symlink(outside, root + ECN)
    why = _roce._write_text(SysRoot(root), ECN, '1')
    assert why == 'cannot write %s: it is a symlink, not a regular file: it is not followed' % ECN
    assert open(outside).read() == '0\n' and os.path.islink(root + ECN)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    root, _outside = _root(tmp_path)
    os.mkfifo(root + ECN)
    why = _roce._write_text(SysRoot(root), ECN, '1')
    assert why == 'cannot write %s: it is a FIFO, not a regular file' % ECN
    assert stat.S_ISFIFO(os.lstat(root + ECN).st_mode)


def test_the_rdma_cm_tos_file_is_checked_the_same_way(tmp_path):
    root, outside = _root(tmp_path)
    ports = tmp_path / 'root/sys/kernel/config/rdma_cm/mlx5_0/ports/1'
    ports.mkdir(parents=True)
    os.symlink(outside, str(ports / 'default_roce_tos'))
    tos = '/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos'
    change = ('rdma_cm default_roce_tos', None, 106,
              [{'mkdir': '/sys/kernel/config/rdma_cm/mlx5_0'}, {'write': tos, 'value': '106', 'skip_if_absent': False}])
    why = _roce.apply(SysRoot(root), None, change)
    assert why == 'cannot write %s: it is a symlink, not a regular file: it is not followed' % tos
    assert open(outside).read() == '0\n'
    os.unlink(str(ports / 'default_roce_tos'))
    os.mkfifo(str(ports / 'default_roce_tos'))
    why = _roce.apply(SysRoot(root), None, change)
    assert why == 'cannot write %s: it is a FIFO, not a regular file' % tos
    os.unlink(str(ports / 'default_roce_tos'))
    assert _roce.apply(SysRoot(root), None, change) is None
    assert (ports / 'default_roce_tos').read_text() == '106\n'
    # The device directory itself is not made through a symlink either.
    os.rename(str(tmp_path / 'root/sys/kernel/config/rdma_cm/mlx5_0'), str(tmp_path / 'moved'))
    os.symlink(str(tmp_path / 'moved'), str(tmp_path / 'root/sys/kernel/config/rdma_cm/mlx5_0'))
    why = _roce.apply(SysRoot(root), None, change)
    assert why == 'cannot make /sys/kernel/config/rdma_cm/mlx5_0: it is a symlink: it is not followed'


def _pci_root(tmp_path):
    device = tmp_path / 'root/sys/bus/pci/devices/0000:00:01.0'
    device.mkdir(parents=True)
    return str(tmp_path / 'root'), str(device / 'config')


def test_acs_ctl_is_written_into_a_regular_config_file(tmp_path):
    root, config = _pci_root(tmp_path)
    with open(config, 'wb') as handle:
        handle.write(bytes(4096))
    assert _pci.write_acs_ctl(SysRoot(root), '0000:00:01.0', 0x200, 0x1d) == 0x1d
    data = open(config, 'rb').read()
    assert len(data) == 4096 and struct.unpack('<H', data[0x206:0x208])[0] == 0x1d   # r+b: nothing truncated


@pytest.mark.parametrize('kind', ['symlink', 'fifo'])
def test_acs_ctl_is_not_written_through_a_symlink_or_into_a_fifo(tmp_path, kind):
    root, config = _pci_root(tmp_path)
    outside = tmp_path / 'outside'
    outside.write_bytes(bytes(4096))
    if kind == 'symlink':
        os.symlink(str(outside), config)
    else:
        os.mkfifo(config)
    with pytest.raises(_paths.NotRegular) as raised:
        _pci.write_acs_ctl(SysRoot(root), '0000:00:01.0', 0x200, 0x1d)
    assert str(raised.value) == ('a symlink, not a regular file: it is not followed' if kind == 'symlink'
                                 else 'a FIFO, not a regular file')
    assert outside.read_bytes() == bytes(4096)
