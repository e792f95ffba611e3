# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import os

import jmespath
import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._host import read_host
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices, read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._roce import read_roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.sim import faults, render, tools_gpu, tools_qos
from tests.unit.conftest import fixture_path, fixture_text

PROFILES = sorted(name[:-4] for name in os.listdir(render.PROFILE_DIR) if name.endswith('.yml'))


def facts(root):
    sysroot = SysRoot(root)
    gdr = _gdr.read_gdr(sysroot, list_rdma_devices(sysroot))
    gdr['host'] = read_host(sysroot)      # as gdr_facts returns it (the fault catalog checks gdr.host)
    devices = read_ib(sysroot)
    # roce_qos_facts (the RoCE QoS faults check roce.ports), the DCB stand-ins answered in-process.
    roce = {'ports': read_roce(sysroot, devices, lambda argv: tools_qos.answer(root, argv)[:2])}
    # gpu_state_facts (the GPU state faults check gpu.*), the nvidia-smi stand-in answered in-process.
    return {'ib': {'devices': devices}, 'gdr': gdr, 'roce': roce, 'gpu': tools_gpu.read_facts(root)}, sysroot


def test_parse_ofed_version_fixtures():
    assert _gdr.parse_ofed_version(fixture_text('public', 'ofed_info', 'daocloud_mlnx_ofed_23_07.txt')) == \
        'MLNX_OFED_LINUX-23.07-0.5.1.2'
    assert _gdr.parse_ofed_version(fixture_text('public', 'ofed_info', 'daocloud_ofed_info_full_head_23_10.txt')) == \
        'MLNX_OFED_LINUX-23.10-1.1.9.0'
    assert _gdr.parse_ofed_version('if [ "X$1" == "X-s" ]; then echo OFED-internal-24.01-0.3.3:; exit 0; fi') == \
        'OFED-internal-24.01-0.3.3'
    assert _gdr.parse_ofed_version('no version here') is None


def test_parse_modules_and_symvers():
    assert _gdr.parse_modules('nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 2 x, Live 0x0\n\n') == {'nvidia_peermem', 'nvidia'}
    assert _gdr.symvers_exports('0x1\tmm_kobj\tvmlinux\tEXPORT_SYMBOL_GPL\t', 'mm_kobj')
    assert not _gdr.symvers_exports('0x1\tmm_kobj_foo\tvmlinux\tEXPORT_SYMBOL_GPL\t', 'mm_kobj')
    assert _gdr.kernel_version('5.14.0-570.el9_6.x86_64') == (5, 14) and _gdr.kernel_version('?') is None


def _seed_matrix():
    rows = {}
    lines = fixture_text('seeds', '000_mx_smi_topo_n.txt').splitlines()
    header = lines[0].split()
    nics = dict(line.split(': ') for line in lines if line.startswith('NIC') and ': ' in line)
    for line in lines[1:]:
        cells = line.split()
        if cells and cells[0].startswith('GPU'):
            rows[cells[0]] = dict((nics[col], cells[1 + i]) for i, col in enumerate(header) if col.startswith('NIC'))
    return rows


def test_metax_matrix_equals_seed_mx_smi(sim_root):
    root, _ctx = sim_root('metax_c500_cx7')
    gdr = facts(root)[0]['gdr']
    expected = _seed_matrix()
    assert len(expected) == 8
    assert gdr['matrix'] == expected
    assert [g['nearest_nic'] for g in gdr['gpus']] == ['mlx5_0'] * 4 + ['mlx5_1'] * 4
    assert gdr['gpus'][3]['nearest_nic_distance'] == 'PIX'
    assert [g['vendor'] for g in gdr['gpus']] == ['metax'] * 8


@pytest.mark.parametrize('profile', [p for p in PROFILES if p not in ('no_rdma_vm', 'h200x2_no_rdma', 'homelab_cx4')])
def test_healthy_profiles_are_ready(sim_root, profile):
    root, _ctx = sim_root(profile)
    result, sysroot = facts(root)
    assert result['gdr']['gdr_ready'] is True, result['gdr']['reasons']
    assert result['gdr']['reasons'] == []
    assert all(b['redirects_p2p'] is False for b in result['gdr']['acs'])
    assert all(p['state'] == 'ACTIVE' for d in result['ib']['devices'] for p in d['ports'])
    assert sysroot.warnings == []


@pytest.mark.parametrize('profile, gpus, nics', [
    ('nvidia_h100_8x_ndr', 8, 9), ('amd_mi300x_roce', 8, 8), ('metax_c500_cx7', 8, 3), ('homelab_cx4', 1, 1)])
def test_each_gpu_has_its_own_rail(sim_root, profile, gpus, nics):
    gdr = facts(sim_root(profile)[0])[0]['gdr']
    assert (len(gdr['gpus']), len(gdr['nics'])) == (gpus, nics)
    if profile in ('nvidia_h100_8x_ndr', 'amd_mi300x_roce'):
        assert [g['nearest_nic'] for g in gdr['gpus']] == ['mlx5_%d' % i for i in range(8)]
        assert set(g['nearest_nic_distance'] for g in gdr['gpus']) == {'PIX'}
        # the storage/other-socket NICs are SYS from GPU0
        assert gdr['matrix']['GPU0']['mlx5_7'] == 'SYS'


def test_seed000_chain_is_reproduced(sim_root):
    root, _ctx = sim_root('metax_c500_cx7', 'mm_kobj_not_exported')
    gdr = facts(root)[0]['gdr']
    assert gdr['gdr_ready'] is False
    assert len(gdr['reasons']) == 1
    reason = gdr['reasons'][0]
    for words in ('kernel 5.14.0-570.12.1.el9_6.x86_64 does not export mm_kobj', 'HAVE_MM_KOBJ_EXPORTED',
                  '/sys/kernel/mm/memory_peers/mxcd/version does not exist', 'MCCL does not detect GPUDirect RDMA'):
        assert words in reason
    # The order of the chain is the order of causes.
    chain = gdr['peer_memory']['paths']['metax']['chain']
    assert 'mm_kobj' in chain[0] and 'HAVE_MM_KOBJ_EXPORTED' in chain[1] and 'memory_peers' in chain[2]
    # Not in kallsyms, so the build tree's Module.symvers decides (kallsyms may hide data symbols).
    assert gdr['kernel']['mm_kobj_source'] == '/usr/src/kernels/5.14.0-570.12.1.el9_6.x86_64/Module.symvers'
    assert gdr['ofed']['config_header'].endswith('/5.14.0-570.12.1.el9_6.x86_64/compat/config.h')


def test_stale_ofed_build_says_rebuild(sim_root):
    root, _ctx = sim_root('metax_c500_cx7', 'ofed_stale_build')
    gdr = facts(root)[0]['gdr']
    assert gdr['gdr_ready'] is False
    assert 'must be rebuilt' in gdr['reasons'][0]


def test_nvidia_peermem_alone_satisfies_nccl(sim_root):
    # NCCL accepts /sys/module/nvidia_peermem/version when memory_peers is missing
    # (src/transport/net_ib/gdr.cc), so the seed-000 kernel does not break NVIDIA nodes.
    root, _ctx = sim_root('nvidia_h100_8x_ndr', 'mm_kobj_not_exported')
    gdr = facts(root)[0]['gdr']
    assert gdr['peer_memory']['memory_peers_present'] is False
    assert gdr['peer_memory']['paths']['nvidia']['evidence'] == '/sys/module/nvidia_peermem/version'
    assert gdr['gdr_ready'] is True


def test_missing_peermem_on_nvidia_with_dmabuf_is_a_note(sim_root):
    root, _ctx = sim_root('nvidia_h100_8x_ndr', 'peermem_not_loaded')
    gdr = facts(root)[0]['gdr']
    # The open kernel module on a 5.15 kernel can use dma-buf instead.
    assert gdr['dmabuf']['possible'] is True
    assert gdr['gdr_ready'] is True and 'dma-buf path is possible' in gdr['notes'][0]


def test_missing_peermem_without_dmabuf_blocks(tmp_path):
    profile = render.load_profile('nvidia_h100_8x_ndr')
    profile['nvidia_driver']['open'] = False      # proprietary module: no dma-buf export
    faults.apply(profile, 'peermem_not_loaded')
    render.render(profile, str(tmp_path))
    gdr = facts(str(tmp_path))[0]['gdr']
    assert gdr['dmabuf']['possible'] is False
    assert gdr['gdr_ready'] is False
    assert gdr['reasons'] == [
        'nvidia GPUs: peer-memory module nvidia_peermem or nv_peer_mem is not loaded (/proc/modules) -> '
        'so /sys/kernel/mm/memory_peers/nv_mem/version does not exist -> NCCL does not detect GPUDirect RDMA '
        'and stages every transfer through host memory, a fraction of the cross-node bandwidth']


# The catalog on the base profiles: a variant (tests/sim/profiles with ``base:``) adds cards beside
# the same hardware, whose facts under each fault its base already shows.
FAULT_CASES = [(p, f) for p in PROFILES if not render.variant_of(p) for f in sorted(faults.CATALOG)
               if faults.applies(render.load_profile(p), f)]


def test_every_fault_applies_somewhere():
    assert set(f for _p, f in FAULT_CASES) == set(faults.CATALOG)


@pytest.mark.parametrize('profile, fault', FAULT_CASES)
def test_fault_shows_in_facts(sim_root, profile, fault):
    root, contexts = sim_root(profile, fault)
    result = facts(root)[0]
    expected = faults.expectations(fault, contexts[0])
    for expr, value in expected:
        assert jmespath.search(expr, result) == value, expr
    # The same expectations must not all hold on the healthy node, or they test nothing.
    healthy = facts(sim_root(profile)[0])[0]
    assert any(jmespath.search(expr, healthy) != value for expr, value in expected)


def test_h200_real_pci_tree(tmp_path):
    """The real GPU machine's PCI functions (fixtures/real/h200x2/pci_sysfs.txt) as a root."""
    root = str(tmp_path)
    with open(fixture_path('real', 'h200x2', 'pci_sysfs.txt')) as handle:
        for line in handle:
            bdf, *attrs = line.split()
            values = dict(a.split('=') for a in attrs)
            devdir = os.path.join(root, 'sys/devices/pci0000:00', bdf)
            os.makedirs(devdir)
            for name, key in (('class', 'class'), ('vendor', 'vendor'), ('device', 'device'), ('numa_node', 'numa')):
                with open(os.path.join(devdir, name), 'w') as out:
                    out.write(values[key] + '\n')
            os.makedirs(os.path.join(root, 'sys/bus/pci/devices'), exist_ok=True)
            os.symlink('../../../devices/pci0000:00/' + bdf, os.path.join(root, 'sys/bus/pci/devices', bdf))
    gdr = facts(root)[0]['gdr']
    assert [(g['name'], g['pci_address'], g['vendor'], g['numa_node']) for g in gdr['gpus']] == [
        ('GPU0', '0000:00:06.0', 'nvidia', None), ('GPU1', '0000:00:07.0', 'nvidia', None)]
    assert gdr['nics'] == [] and gdr['gdr_ready'] is False
    assert gdr['reasons'][0] == 'no RDMA NIC (/sys/class/infiniband is empty)'


def test_empty_root_is_not_an_error(tmp_path):
    result, sysroot = facts(str(tmp_path))
    assert result['ib']['devices'] == [] and result['gdr']['gpus'] == []
    assert result['gdr']['kernel'] == {'release': None, 'mm_kobj_exported': None, 'mm_kobj_source': None}
    assert result['gdr']['gdr_ready'] is False


def test_acs_unreadable_as_non_root_is_unknown(sim_root, tmp_path):
    root, _ctx = sim_root('nvidia_h100_8x_ndr')
    # A copy of one bridge's config cut to the 64 bytes sysfs serves to a non-root user.
    gdr = facts(root)[0]['gdr']
    bridge = gdr['topology'][0]['bridges'][0]
    config = os.path.join(root, 'sys/bus/pci/devices', bridge, 'config')
    with open(config, 'rb') as handle:
        data = handle.read()
    try:
        with open(config, 'wb') as handle:
            handle.write(data[:64])
        result, sysroot = facts(root)
        entry = [b for b in result['gdr']['acs'] if b['pci_address'] == bridge][0]
        assert entry['readable'] is False and entry['redirects_p2p'] is None
        assert result['gdr']['topology'][0]['acs_redirect'] is None
        assert any('readable by root only' in w for w in sysroot.warnings)
    finally:
        with open(config, 'wb') as handle:
            handle.write(data)


def _kernel_root(tmp_path, files):
    for rel, content in files.items():
        path = tmp_path / rel.lstrip('/')
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return SysRoot(str(tmp_path))


def test_mm_kobj_from_kallsyms_when_no_export_table(tmp_path):
    sysroot = _kernel_root(tmp_path, {
        '/proc/sys/kernel/osrelease': '5.14.0-427.13.1.el9_4.x86_64\n',
        # the line the seed's grep finds on RHEL 9.4
        '/proc/kallsyms': 'ffffffffa7485b28 r __ksymtab_mm_init\nffffffffa7485b2c r __ksymtab_mm_kobj\n'})
    assert _gdr.read_kernel(sysroot) == {'release': '5.14.0-427.13.1.el9_4.x86_64', 'mm_kobj_exported': True,
                                         'mm_kobj_source': '/proc/kallsyms'}
    (tmp_path / 'proc/kallsyms').write_text('ffffffffa7485b2c r __ksymtab_mm_kobj_extra\n0 D mm_kobj\n')
    assert _gdr.read_kernel(SysRoot(str(tmp_path)))['mm_kobj_exported'] is False


def test_mm_kobj_from_rhel_boot_symvers(tmp_path):
    import gzip
    release = '5.14.0-570.12.1.el9_6.x86_64'
    sysroot = _kernel_root(tmp_path, {
        '/proc/sys/kernel/osrelease': release,
        '/boot/symvers-%s.gz' % release: gzip.compress(b'0x1\tkobject_put\tvmlinux\tEXPORT_SYMBOL\t\n'),
        '/proc/kallsyms': 'ffffffffa7485b2c r __ksymtab_mm_kobj\n'})
    # The export table wins over kallsyms (and is what OFED's configure reads).
    assert _gdr.read_kernel(sysroot) == {'release': release, 'mm_kobj_exported': False,
                                         'mm_kobj_source': '/boot/symvers-%s.gz' % release}


def test_corrupt_boot_symvers_warns_and_falls_back(tmp_path):
    sysroot = _kernel_root(tmp_path, {'/proc/sys/kernel/osrelease': '6.1.0', '/boot/symvers-6.1.0.gz': b'not gzip',
                                      '/proc/kallsyms': '0 r __ksymtab_mm_kobj\n'})
    assert _gdr.read_kernel(sysroot)['mm_kobj_source'] == '/proc/kallsyms'
    assert any('symvers-6.1.0.gz' in w for w in sysroot.warnings)


def test_nearest_nic_ties_fall_in_natural_order_everywhere():
    # Two NICs under the GPU's switch (same class, same bridges): mlx5_2 before mlx5_10, in
    # the facts (build_topology) as in the NCCL settings (nearest_nics) - string order would
    # have picked mlx5_10 in one place and mlx5_2 in the other.
    assert _gdr.natural_key('mlx5_2') < _gdr.natural_key('mlx5_10')
    assert _gdr.nic_rank('PIX', ['b1'], 'mlx5_2') < _gdr.nic_rank('PIX', ['b1'], 'mlx5_10')
    assert _gdr.nic_rank('PIX', ['b1', 'b2'], 'mlx5_0') > _gdr.nic_rank('PIX', ['b1'], 'mlx5_9')
    assert _gdr.nic_rank('PXB', [], 'mlx5_0') > _gdr.nic_rank('PIX', ['b1', 'b2'], 'mlx5_9')
    topology = [{'gpu': 'gpu0', 'nic': 'mlx5_10', 'distance': 'PIX', 'bridges': ['b1']},
                {'gpu': 'gpu0', 'nic': 'mlx5_2', 'distance': 'PIX', 'bridges': ['b1']},
                {'gpu': 'gpu0', 'nic': 'mlx5_0', 'distance': 'SYS', 'bridges': []},
                {'gpu': 'gpu1', 'nic': 'mlx5_0', 'distance': 'SYS', 'bridges': []},
                {'gpu': 'gpu1', 'nic': 'mlx5_2', 'distance': 'unknown', 'bridges': []}]
    assert _gdr.nearest_nics(topology) == {'gpu0': ('PIX', 'mlx5_2'), 'gpu1': ('SYS', 'mlx5_0')}
    assert _gdr.nearest_nics(topology, among={'mlx5_10', 'mlx5_0'}) == {'gpu0': ('PIX', 'mlx5_10'), 'gpu1': ('SYS', 'mlx5_0')}
    assert _gdr.nearest_nics(None) == {}


def test_mm_kobj_export_found_past_the_first_mib_of_module_symvers(tmp_path):
    # A distribution kernel's Module.symvers is 1-2 MB; mm_kobj may sit anywhere in it.
    release = '5.15.0-105-generic'
    (tmp_path / 'proc/sys/kernel').mkdir(parents=True)
    (tmp_path / 'proc/sys/kernel/osrelease').write_text(release + '\n')
    build = tmp_path / ('lib/modules/%s/build' % release)
    build.mkdir(parents=True)
    filler = ''.join('0x%08x\tsym_%06d\tvmlinux\tEXPORT_SYMBOL\t\n' % (i, i) for i in range(40000))
    assert len(filler) > 1 << 20
    (build / 'Module.symvers').write_text(filler + '0x1234abcd\tmm_kobj\tvmlinux\tEXPORT_SYMBOL_GPL\t\n')
    kernel = _gdr.read_kernel(SysRoot(str(tmp_path)))
    assert kernel['mm_kobj_exported'] is True
    assert kernel['mm_kobj_source'] == '/lib/modules/%s/build/Module.symvers' % release
    (build / 'Module.symvers').write_text(filler)
    assert _gdr.read_kernel(SysRoot(str(tmp_path)))['mm_kobj_exported'] is False


def test_unreadable_module_symvers_is_not_read_as_not_exported(tmp_path):
    release = '5.15.0-105-generic'
    (tmp_path / 'proc/sys/kernel').mkdir(parents=True)
    (tmp_path / 'proc/sys/kernel/osrelease').write_text(release + '\n')
    # A Module.symvers that exists but cannot be read (a directory: EISDIR, for root too).
    (tmp_path / ('lib/modules/%s/build/Module.symvers' % release)).mkdir(parents=True)
    sysroot = SysRoot(str(tmp_path))
    kernel = _gdr.read_kernel(sysroot)
    # No other source here: unknown, with the reason in the warnings - never False.
    assert kernel['mm_kobj_exported'] is None and kernel['mm_kobj_source'] is None
    assert any('Module.symvers' in w for w in sysroot.warnings)


def test_natural_order_takes_ascii_digits_only():
    # '\u00b2'.isdigit() is true, int('\u00b2') fails: a device mlx5_0\u00b2 in a snapshot once failed
    # gdr_facts and then the report of every node.
    names = ['mlx5_10', 'mlx5_0\u00b2', 'mlx5_2', '10', 'mlx5_0', 'mlx5_\u0663', None, '']
    ordered = sorted(names, key=_gdr.natural_key)
    assert ordered == [None, '', '10', 'mlx5_0', 'mlx5_0\u00b2', 'mlx5_2', 'mlx5_10', 'mlx5_\u0663']
    assert _gdr.natural_key('mlx5_0\u00b2') == ['mlx', (1, '5'), '_', (0, ''), '\u00b2']
    assert _gdr.natural_key('12') == ['', (2, '12'), '']
    # Leading zeros count for nothing, as in a number: mlx5_02 and mlx5_2 tie.
    assert _gdr.natural_key('mlx5_02') == _gdr.natural_key('mlx5_2')
