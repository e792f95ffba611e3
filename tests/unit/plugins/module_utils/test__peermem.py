# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""module_utils/_peermem.py: the peer-memory module against the loaded driver, RDMA functions without an
RDMA device, the kernel log - on the real GPU machine's files, synthetic module files and hostile trees."""

from __future__ import annotations

import gzip
import lzma
import os
import struct

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _peermem
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.sim import render
from tests.unit.conftest import fixture_path, fixture_text

RELEASE = '6.18.0'


def _write(root, rel, data):
    path = os.path.join(str(root), rel.lstrip('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as handle:
        handle.write(data if isinstance(data, bytes) else data.encode())
    return path


def _real_h200(root):
    """The GPU machine's loaded modules and driver (tests/fixtures/real/h200x2/state): driver 580.159.04, no peermem."""
    _write(root, '/proc/driver/nvidia/version', fixture_text('real', 'h200x2', 'state', 'proc_driver_version.txt'))
    _write(root, '/proc/modules', fixture_text('real', 'h200x2', 'state', 'proc_modules_nv.txt'))
    module = None
    lines = fixture_text('real', 'h200x2', 'state', 'sys_modules_nvidia.txt').splitlines()
    for index, line in enumerate(lines):
        if line.startswith('== /sys/module/'):
            module = line[3:]
        elif line == 'version' and module:
            # The listing, then the version and srcversion values after the last entry ('version').
            _write(root, module + '/version', lines[index + 1] + '\n')
            _write(root, module + '/srcversion', lines[index + 2] + '\n')
    return SysRoot(str(root))


def _modules(root):
    return set(line.split()[0] for line in open(os.path.join(str(root), 'proc/modules')) if line.strip())


def _install(root, files, release=RELEASE):
    """modules.dep naming ``files`` ({relative path: bytes}) for ``release``."""
    for rel, data in files.items():
        _write(root, '/lib/modules/%s/%s' % (release, rel), data)
    _write(root, '/lib/modules/%s/modules.dep' % release, '\n'.join('%s: kernel/drivers/infiniband/core/ib_core.ko' % rel for rel in files))


def test_nvrm_version_of_the_real_driver():
    text = fixture_text('real', 'h200x2', 'state', 'proc_driver_version.txt')
    assert _peermem.nvrm_version(text) == '580.159.04'
    assert _peermem.nvrm_version('NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Sun Aug 24 2025') == '570.124.06'
    assert _peermem.nvrm_version('garbage') is None


def test_real_h200_has_no_peer_memory_module(tmp_path):
    sysroot = _real_h200(tmp_path)
    assert _peermem.read_peer_memory_build(sysroot, _modules(tmp_path), RELEASE) == []


@pytest.mark.parametrize('version, state', [('580.159.04', 'match'), ('575.57.08', 'mismatch')])
def test_peermem_file_against_the_real_driver(tmp_path, version, state):
    sysroot = _real_h200(tmp_path)
    _install(tmp_path, {'kernel/drivers/video/nvidia-peermem.ko': render.module_elf({'version': version, 'vermagic': RELEASE + ' SMP'}),
                        'kernel/drivers/video/nvidia.ko': render.module_elf({'version': '580.159.04'})})
    entry, = _peermem.read_peer_memory_build(sysroot, _modules(tmp_path), RELEASE)
    assert (entry['module'], entry['loaded'], entry['file_state'], entry['file_version']) == ('nvidia_peermem', False, 'read', version)
    assert (entry['driver_version'], entry['driver_source']) == ('580.159.04', '/sys/module/nvidia/version')
    assert entry['state'] == state
    assert entry['file_vermagic'] == RELEASE + ' SMP'
    if state == 'mismatch':
        assert '575.57.08' in entry['why'] and '580.159.04' in entry['why']


def test_loaded_peermem_of_an_older_driver(tmp_path):
    sysroot = _real_h200(tmp_path)
    _write(tmp_path, '/sys/module/nvidia_peermem/version', '570.124.06\n')
    entry, = _peermem.read_peer_memory_build(sysroot, _modules(tmp_path) | {'nvidia_peermem'}, RELEASE)
    assert (entry['state'], entry['loaded_version'], entry['driver_version']) == ('mismatch', '570.124.06', '580.159.04')
    assert entry['file_state'].endswith('modules.dep not readable')


def test_nv_peer_mem_carries_its_own_version(tmp_path):
    sysroot = _real_h200(tmp_path)
    _write(tmp_path, '/sys/module/nv_peer_mem/version', '1.3-0\n')
    entry, = _peermem.read_peer_memory_build(sysroot, _modules(tmp_path) | {'nv_peer_mem'}, RELEASE)
    assert entry['state'] == 'unknown' and 'its own version (1.3-0)' in entry['why']


def test_driver_version_unreadable_is_unknown(tmp_path):
    _write(tmp_path, '/sys/module/nvidia_peermem/version', '570.124.06\n')
    entry, = _peermem.read_peer_memory_build(SysRoot(str(tmp_path)), {'nvidia_peermem'}, RELEASE)
    assert entry['state'] == 'unknown' and entry['driver_version'] is None


@pytest.mark.parametrize('wide, big', [(True, False), (False, True), (True, True), (False, False)])
def test_modinfo_of_every_elf_class_and_byte_order(wide, big):
    image = render.module_elf({'version': '1.2', 'srcversion': 'ABC', 'alias': 'x'}, big_endian=big, wide=wide)
    assert _peermem.parse_modinfo(_peermem.elf_section(image)) == {'version': '1.2', 'srcversion': 'ABC'}


@pytest.mark.parametrize('suffix, pack, state', [
    ('.ko.xz', lzma.compress, 'read'),
    ('.ko.gz', gzip.compress, 'read'),
    ('.ko.zst', lambda data: b'\x28\xb5\x2f\xfd' + data, 'not read: compressed (zstd'),
])
def test_compressed_modules(tmp_path, suffix, pack, state):
    rel = '/lib/modules/%s/updates/nvidia-peermem%s' % (RELEASE, suffix)
    _write(tmp_path, rel, pack(render.module_elf({'version': '580.159.04'})))
    info = _peermem.module_file_info(SysRoot(str(tmp_path)), rel)
    assert info['state'].startswith(state)
    assert info['version'] == ('580.159.04' if state == 'read' else None)


def _section_table_at(image, offset):
    return image[:0x28] + struct.pack('<Q', offset) + image[0x30:]


@pytest.mark.parametrize('mutate, words', [
    (lambda image: b'MZ' + image[2:], 'not an ELF'),
    (lambda image: image[:40], 'not an ELF'),
    (lambda image: image[:0x3c] + struct.pack('<H', 60000) + image[0x3e:], 'out of bounds'),
    (lambda image: _section_table_at(image, 1 << 40), 'past the end'),
    (lambda image: image[:-64], 'past the end'),
    (lambda image: image.replace(b'.modinfo', b'.notinfo'), 'no .modinfo'),
])
def test_hostile_module_files_are_said_not_read(tmp_path, mutate, words):
    rel = '/lib/modules/%s/nvidia-peermem.ko' % RELEASE
    _write(tmp_path, rel, mutate(render.module_elf({'version': '580.159.04'})))
    info = _peermem.module_file_info(SysRoot(str(tmp_path)), rel)
    assert info['state'].startswith('not read') and words in info['state'] and info['version'] is None


def test_a_huge_modinfo_section_is_refused(tmp_path):
    image = bytearray(render.module_elf({'version': '1'}))
    # The .modinfo section header (index 1) claims 2 MiB.
    table = struct.unpack('<Q', bytes(image[0x28:0x30]))[0]
    struct.pack_into('<Q', image, table + 64 + 32, 2 << 20)
    with pytest.raises(ValueError, match='too long'):
        _peermem.elf_section(bytes(image))


def test_a_fifo_or_a_link_out_of_the_root_is_not_read(tmp_path):
    base = tmp_path / ('lib/modules/%s' % RELEASE)
    base.mkdir(parents=True)
    os.mkfifo(str(base / 'fifo.ko'))
    outside = tmp_path.parent / 'outside.ko'
    outside.write_bytes(render.module_elf({'version': '9.9'}))
    os.symlink('../../../../outside.ko', str(base / 'link.ko'))
    sysroot = SysRoot(str(tmp_path))
    assert _peermem.module_file_info(sysroot, '/lib/modules/%s/fifo.ko' % RELEASE)['state'].startswith('not read')
    assert _peermem.module_file_info(sysroot, '/lib/modules/%s/link.ko' % RELEASE)['version'] is None


def test_modules_dep_paths_that_climb_out_are_ignored(tmp_path):
    _write(tmp_path, '/lib/modules/%s/modules.dep' % RELEASE,
           '../../../etc/nvidia-peermem.ko:\nkernel/a/nvidia.ko.xz: kernel/b/drm.ko\n/abs/nv_peer_mem.ko:\nkernel/nvidia-drm.ko:\n')
    found, why = _peermem.module_files(SysRoot(str(tmp_path)), RELEASE, _peermem.PEER_MODULES + ('nvidia',))
    assert why is None
    assert found == {'nvidia': '/lib/modules/%s/kernel/a/nvidia.ko.xz' % RELEASE, 'nv_peer_mem': '/abs/nv_peer_mem.ko'}


# ---------------------------------------------------------------------------- RDMA functions without a device

def _pci(bdf, cls, vendor, driver):
    return {bdf: {'class': cls, 'vendor_id': vendor, 'driver': driver}}


def test_candidates_by_class_vendor_and_driver():
    pci = {}
    for item in (_pci('0000:01:00.0', 0x020700, 0x15b3, None),          # IB class, probe failed
                 _pci('0000:02:00.0', 0x020000, 0x15b3, 'mlx5_core'),    # ConnectX Ethernet, no IB device
                 _pci('0000:03:00.0', 0x020000, 0x15b3, 'mlx5_core'),    # has its device
                 _pci('0000:04:00.0', 0x020000, 0x15b3, 'vfio-pci'),     # handed to a VM
                 _pci('0000:05:00.0', 0x020000, 0x14e4, 'tg3'),          # Broadcom 1 GbE: no RDMA
                 _pci('0000:06:00.0', 0x020000, 0x14e4, 'bnxt_en'),      # Broadcom with bnxt_re possible
                 _pci('0000:07:00.0', 0x020000, 0x8086, 'igb'),
                 _pci('0000:08:00.0', 0x020000, 0x1af4, 'virtio-pci')):
        pci.update(item)
    found = [(bdf, strict) for bdf, _dev, strict in _peermem.rdma_candidates(pci, [('mlx5_0', '0000:03:00.0')])]
    assert found == [('0000:01:00.0', True), ('0000:02:00.0', True), ('0000:06:00.0', False)]


def test_real_gpu_machine_has_no_rdma_function():
    """tests/fixtures/real/h200x2/state/pci_rdma_class.txt: virtio functions and two GPUs."""
    pci = {}
    for line in fixture_text('real', 'h200x2', 'state', 'pci_rdma_class.txt').splitlines():
        parts = line.split()
        pci.update(_pci(parts[0], int(parts[1], 16), int(parts[2], 16), parts[3] if len(parts) > 3 else None))
    assert len(pci) == 8 and _peermem.rdma_candidates(pci, []) == []


def test_kernel_log_of_a_failed_mlx5_probe(tmp_path):
    """tests/fixtures/public/kmsg/mlx5_probe_failed.txt, as dmesg prints it and as /dev/kmsg records."""
    lines = fixture_text('public', 'kmsg', 'mlx5_probe_failed.txt')
    _write(tmp_path, '/dev/kmsg', lines)
    pci = _pci('0000:01:00.0', 0x020000, 0x15b3, None)
    entry, = _peermem.read_rdma_unbound(SysRoot(str(tmp_path)), pci, [], {'mlx5_core'})
    assert entry['log_state'] == 'read'
    assert entry['log'][-1] == 'mlx5_core: probe of 0000:01:00.0 failed with error -22'
    assert entry['log'][0] == 'mlx5_core 0000:01:00.0: firmware version: 14.32.1010'
    records = '6,100,5376443,-;mlx5_core 0000:01:00.0: handle_hca_cap failed\n SUBSYSTEM=pci\n DEVICE=+pci:0000:01:00.0\n'
    assert _peermem.parse_kmsg(records) == ['mlx5_core 0000:01:00.0: handle_hca_cap failed']


def test_kernel_log_missing_or_hostile(tmp_path):
    pci = _pci('0000:02:00.0', 0x020000, 0x15b3, 'mlx5_core')
    entry, = _peermem.read_rdma_unbound(SysRoot(str(tmp_path)), pci, [], {'mlx5_core'})
    assert entry['log'] == [] and entry['log_state'].startswith('not read')
    assert 'mlx5_ib, which makes its RDMA device, is not loaded' in entry['why']
    _write(tmp_path, '/dev/kmsg', 'x' * 100 + '\x1b[31m mlx5_core 0000:02:00.0: \x00bad' + '\n' + 'y' * (5 << 20))
    entry, = _peermem.read_rdma_unbound(SysRoot(str(tmp_path)), pci, [], {'mlx5_core', 'mlx5_ib'})
    assert len(entry['log']) == 1 and '\x1b' not in entry['log'][0] and '\x00' not in entry['log'][0]
    assert len(entry['log'][0]) <= 240


def test_nothing_is_read_without_a_candidate(tmp_path):
    _write(tmp_path, '/dev/kmsg', 'mlx5_core: probe of 0000:01:00.0 failed')
    assert _peermem.read_rdma_unbound(SysRoot(str(tmp_path)), {}, [], set()) == []


def test_fixture_path_exists():
    assert os.path.isfile(fixture_path('public', 'kmsg', 'mlx5_probe_failed.txt'))


def test_kmsg_records_of_the_real_gpu_machine():
    """tests/fixtures/real/h200x2/state/kmsg_records.txt: /dev/kmsg as the GPU machine's kernel hands it out."""
    messages = _peermem.parse_kmsg(fixture_text('real', 'h200x2', 'state', 'kmsg_records.txt'))
    assert len(messages) == 5 and messages[0].startswith('Linux version 6.18.44')
    assert _peermem.nvrm_version(messages[3] + '\n') == '580.159.04'
    assert messages[4].startswith('NVRM: gpuClearFbhubPoisonIntr')          # flags 'c': a continuation, still a record
