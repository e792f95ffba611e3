# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""PCIe links and the IOMMU mode (module_utils/_pcie.py) on real outputs: sysfs values from public
issues (fixtures/public/sysfs_pci), lspci Link Capabilities/Status turned into the sysfs files the
kernel would show for them (fixtures/public/lspci_link, lspci_acs), the 4x H200 VM
(fixtures/real/h200x4-vm), and simulated nodes."""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _pci, _pcie
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import read_gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.sim import faults, render
from tests.unit.conftest import fixture_path


def _body(*parts):
    with open(fixture_path(*parts)) as handle:
        return [line.rstrip('\n') for line in handle if not line.startswith('## ')]


# ---------------------------------------------------------------------------- values

@pytest.mark.parametrize('text, speed', [
    ('16.0 GT/s PCIe', 16.0), ('32.0 GT/s PCIe', 32.0), ('8.0 GT/s PCIe', 8.0), ('2.5 GT/s PCIe', 2.5),
    ('5.0 GT/s PCIe', 5.0), ('64.0 GT/s PCIe', 64.0), ('16.0 GT/s PCIe\n', 16.0),
    # Kernels before 5.5 (PCIE_SPEED2STR, drivers/pci/pci.h): no '.0', no 'PCIe'.
    ('8 GT/s', 8.0), ('5 GT/s', 5.0), ('2.5 GT/s', 2.5), ('16 GT/s', 16.0),
    ('Unknown', None), ('Unknown speed', None), ('', None), (None, None), ('16.0 GT/s PCIe x16', None),
    ('9' * 400 + ' GT/s', None), ('\u0661\u0666 GT/s', None),
])
def test_parse_speed(text, speed):
    assert _pcie.parse_speed(text) == speed


@pytest.mark.parametrize('text, width', [('16', 16), ('8', 8), ('0', 0), ('1\n', 1), ('x16', 16),
                                         ('', None), (None, None), ('-1', None), ('999', None), ('16 lanes', None)])
def test_parse_width(text, width):
    assert _pcie.parse_width(text) == width


def test_sysfs_fixtures_parse():
    """Every value of the public sysfs outputs parses (tail -v and grep layouts)."""
    values = {}
    lines = _body('public', 'sysfs_pci', 'nokyan_resources_512_gen5_gpu_x8.txt')
    for index, line in enumerate(lines):
        match = re.match(r'^==> /sys/bus/pci/devices/(\S+)/(\w+) <==$', line)
        if match:
            values[(match.group(1), match.group(2))] = lines[index + 1]
    for line in _body('public', 'sysfs_pci', 'lact_334_grep_gen4_x16.txt'):
        path, _sep, value = line.partition(':')
        values[('card0', path.rsplit('/', 1)[1])] = value
    parsed = dict((key, _pcie.parse_speed(v) if 'speed' in key[1] else _pcie.parse_width(v)) for key, v in values.items())
    assert parsed == {
        ('0000:01:00.0', 'current_link_speed'): 16.0, ('0000:01:00.0', 'current_link_width'): 8,
        ('0000:01:00.0', 'max_link_speed'): 32.0, ('0000:01:00.0', 'max_link_width'): 16,
        ('0000:03:00.0', 'current_link_speed'): 32.0, ('0000:03:00.0', 'current_link_width'): 16,
        ('0000:03:00.0', 'max_link_speed'): 32.0, ('0000:03:00.0', 'max_link_width'): 16,
        ('card0', 'current_link_speed'): 16.0, ('card0', 'current_link_width'): 16,
        ('card0', 'max_link_speed'): 16.0, ('card0', 'max_link_width'): 16}


def test_bandwidth_is_the_kernels():
    """link_gbps gives the figures the kernel prints in its 'available PCIe bandwidth' line."""
    seen = 0
    pattern = re.compile(r'([\d.]+) Gb/s available PCIe bandwidth, limited by ([\d.]+) GT/s PCIe x(\d+) link .*'
                         r'\(capable of ([\d.]+) Gb/s with ([\d.]+) GT/s PCIe x(\d+) link\)')
    for line in _body('public', 'sysfs_pci', 'dmesg_pcie_bandwidth_limited.txt'):
        gbps, speed, width, cap_gbps, cap_speed, cap_width = pattern.search(line).groups()
        assert '%.3f' % _pcie.link_gbps(float(speed), int(width)) == gbps
        assert '%.3f' % _pcie.link_gbps(float(cap_speed), int(cap_width)) == cap_gbps
        seen += 1
    assert seen == 3
    assert _pcie.link_gbps(2.5, 16) == 32.0 and _pcie.link_gbps(5.0, 1) == 4.0     # 8b/10b
    assert _pcie.link_gbps(64.0, 16) == 1024.0                                       # 1b/1b (FLIT)
    assert _pcie.link_gbps(None, 16) is None and _pcie.link_gbps(32.0, 0) is None and _pcie.link_gbps(3.0, 4) is None


# ---------------------------------------------------------------------------- trees

def _write(root, rel, text):
    path = os.path.join(root, rel.lstrip('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(text + '\n')


def _tree(root, devices):
    """devices: [(bdf, parent bdf or None, class, {link file: value})] -> a sysfs tree below root."""
    paths = {}
    for bdf, parent, pci_class, link in devices:
        paths[bdf] = (paths[parent] if parent else '/sys/devices/pci0000:00') + '/' + bdf
        _write(root, paths[bdf] + '/class', pci_class)
        _write(root, paths[bdf] + '/vendor', '0x10de' if pci_class.startswith('0x03') else '0x15b3')
        _write(root, paths[bdf] + '/device', '0x2330')
        for name, value in link.items():
            _write(root, paths[bdf] + '/' + name, value)
        os.makedirs(os.path.join(root, 'sys/bus/pci/devices'), exist_ok=True)
        os.symlink(os.path.relpath(os.path.join(root, paths[bdf].lstrip('/')), os.path.join(root, 'sys/bus/pci/devices')),
                   os.path.join(root, 'sys/bus/pci/devices', bdf))
    return SysRoot(root)


def _links(sysroot, nics=(), gpus=()):
    pci = _pci.read_pci(sysroot)
    return _pcie.read_links(sysroot, pci, [{'name': 'GPU%d' % i, 'pci_address': b} for i, b in enumerate(gpus)],
                            [{'name': 'mlx5_%d' % i, 'pci_address': b} for i, b in enumerate(nics)])


def _sysfs(speed, width, max_speed, max_width):
    return {'current_link_speed': speed, 'current_link_width': width, 'max_link_speed': max_speed, 'max_link_width': max_width}


def _lspci(lines):
    """LnkCap/LnkSta lines -> the four sysfs values the kernel prints for that function."""
    cap = re.search(r'LnkCap:\s+Port #\d+, Speed (\S+), Width x(\d+)', '\n'.join(lines))
    sta = re.search(r'LnkSta:\s+Speed (\S+?)(?: \(\w+\))?, Width x(\d+)', '\n'.join(lines))

    def speed(text):
        value = text.replace('GT/s', '')
        return 'Unknown' if value == 'unknown' else '%.1f GT/s PCIe' % float(value)
    return _sysfs(speed(sta.group(1)), sta.group(2), speed(cap.group(1)), cap.group(2))


NOKYAN_01 = _sysfs('16.0 GT/s PCIe', '8', '32.0 GT/s PCIe', '16')     # fixtures/public/sysfs_pci/nokyan_resources_512...


@pytest.mark.parametrize('port_max, degraded, width_degraded, speed_degraded', [
    (('32.0 GT/s PCIe', '16'), True, True, True),      # the port above can do all: 8 of 16 lanes, 16 of 32 GT/s
    (('16.0 GT/s PCIe', '8'), False, False, False),    # a Gen4 x8 slot: the link does what both ends can do
    (('32.0 GT/s PCIe', '8'), True, False, True),      # a Gen5 x8 slot: only the speed is short
])
def test_a_link_is_judged_against_both_ends(tmp_path, port_max, degraded, width_degraded, speed_degraded):
    sysroot = _tree(str(tmp_path), [
        ('0000:00:01.0', None, '0x060400', _sysfs(NOKYAN_01['current_link_speed'], NOKYAN_01['current_link_width'], *port_max)),
        ('0000:01:00.0', '0000:00:01.0', '0x020700', NOKYAN_01)])
    [link] = _links(sysroot, nics=['0000:01:00.0'])
    assert (link['upstream'], link['downstream'], link['kind'], link['device'], link['nics']) == \
        ('0000:00:01.0', '0000:01:00.0', 'nic', 'mlx5_0', ['mlx5_0'])
    assert (link['speed_gts'], link['width'], link['max_speed_gts'], link['max_width']) == (16.0, 8, 32.0, 16)
    assert (link['degraded'], link['width_degraded'], link['speed_degraded']) == (degraded, width_degraded, speed_degraded)
    assert link['by'] == 'position' and link['gbps'] == 126.024


def test_idle_gpu_speed_is_not_judged_its_lanes_are(tmp_path):
    """jan#183: an idle RTX 4090 at 2.5GT/s x16 under its 16GT/s x16 capability."""
    values = _lspci(_body('public', 'lspci_link', 'jan_183_rtx4090_idle_2_5gt.txt'))
    assert values == _sysfs('2.5 GT/s PCIe', '16', '16.0 GT/s PCIe', '16')
    port = _sysfs('2.5 GT/s PCIe', '16', '16.0 GT/s PCIe', '16')
    sysroot = _tree(str(tmp_path), [('0000:00:01.0', None, '0x060400', port), ('0000:01:00.0', '0000:00:01.0', '0x030200', values)])
    [link] = _links(sysroot, gpus=['0000:01:00.0'])
    assert (link['kind'], link['degraded'], link['gpu_idle_speed'], link['speed_degraded']) == ('gpu', False, True, False)
    # The same link status on an HCA is a fault: ConnectX cards keep their link trained.
    [link] = _links(sysroot, nics=['0000:01:00.0'])
    assert (link['kind'], link['degraded'], link['speed_degraded'], link['gpu_idle_speed']) == ('nic', True, True, False)
    # And a GPU with half its lanes is a fault whatever its load.
    narrow = dict(values, current_link_width='8')
    sysroot = _tree(str(tmp_path / 'narrow'), [('0000:00:01.0', None, '0x060400', dict(port, current_link_width='8')),
                                               ('0000:01:00.0', '0000:00:01.0', '0x030200', narrow)])
    [link] = _links(sysroot, gpus=['0000:01:00.0'])
    assert (link['degraded'], link['width_degraded'], link['gpu_idle_speed']) == (True, True, True)


def test_a_downstream_port_downgraded_by_its_device_is_no_fault(tmp_path):
    """gpud's PEX890xx downstream port 17:00.0 (LnkCap 32GT/s x4, LnkSta '16GT/s (downgraded)'): a Gen4 x4
    device below it makes that the most the link can do; a Gen5 device below it would make it a fault."""
    lines = _body('public', 'lspci_acs', 'gpud_h100_pex890xx_acs_disabled.txt')
    port = _lspci(lines[:lines.index(next(line for line in lines if line.startswith('17:01.0')))])
    assert port == _sysfs('16.0 GT/s PCIe', '4', '32.0 GT/s PCIe', '4')
    for device_max, degraded in (('16.0 GT/s PCIe', False), ('32.0 GT/s PCIe', True)):
        root = str(tmp_path / device_max.split()[0])
        sysroot = _tree(root, [('0000:17:00.0', None, '0x060400', port),
                               ('0000:18:00.0', '0000:17:00.0', '0x020700', _sysfs('16.0 GT/s PCIe', '4', device_max, '4'))])
        [link] = _links(sysroot, nics=['0000:18:00.0'])
        assert (link['capable_speed_gts'], link['degraded']) == (min(32.0, float(device_max.split()[0])), degraded)


def test_root_port_trained_x1_and_a_port_without_link(tmp_path):
    """linfo#114: root port 00:04.0 capable of 5GT/s x4 trained x1; 00:15.0 'Speed unknown' (no link)."""
    lines = _body('public', 'lspci_link', 'linfo_114_root_port_x4_trained_x1.txt')
    port = _lspci(lines[:4])
    assert port == _sysfs('5.0 GT/s PCIe', '1', '5.0 GT/s PCIe', '4')
    sysroot = _tree(str(tmp_path), [('0000:00:04.0', None, '0x060400', port),
                                    ('0000:01:00.0', '0000:00:04.0', '0x020700', _sysfs('5.0 GT/s PCIe', '1', '5.0 GT/s PCIe', '4'))])
    [link] = _links(sysroot, nics=['0000:01:00.0'])
    assert (link['degraded'], link['width_degraded'], link['speed_degraded'], link['gbps']) == (True, True, False, 4.0)
    unknown = _lspci(lines[5:])
    assert unknown['current_link_speed'] == 'Unknown'
    sysroot = _tree(str(tmp_path / 'unknown'), [('0000:00:15.0', None, '0x060400', unknown),
                                                ('0000:02:00.0', '0000:00:15.0', '0x020700', unknown)])
    [link] = _links(sysroot, nics=['0000:02:00.0'])
    assert link['degraded'] is None and 'could not be read' in link['reason']


def test_an_unknown_maximum_is_not_judged(tmp_path):
    """lshca#51: a ConnectX-7 whose maximum speed the reader did not know: no verdict, not 'degraded'."""
    values = _lspci(_body('public', 'lspci_link', 'lshca_51_cx7_speed_unknown.txt'))
    assert values == _sysfs('16.0 GT/s PCIe', '16', 'Unknown', '16')
    sysroot = _tree(str(tmp_path), [('0000:00:01.0', None, '0x060400', _sysfs('16.0 GT/s PCIe', '16', '32.0 GT/s PCIe', '16')),
                                    ('0000:01:00.0', '0000:00:01.0', '0x020700', values)])
    [link] = _links(sysroot, nics=['0000:01:00.0'])
    assert (link['capable_speed_gts'], link['degraded']) == (None, None)
    # Nor an unknown maximum at the port above.
    sysroot = _tree(str(tmp_path / 'port'), [('0000:00:01.0', None, '0x060400', _sysfs('16.0 GT/s PCIe', '16', 'Unknown speed', '16')),
                                             ('0000:01:00.0', '0000:00:01.0', '0x020700', _sysfs('16.0 GT/s PCIe', '16', '32.0 GT/s PCIe', '16'))])
    [link] = _links(sysroot, nics=['0000:01:00.0'])
    assert link['degraded'] is None


def test_real_h200_vm(tmp_path):
    """fixtures/real/h200x4-vm: GPUs on the root bus at 32.0 GT/s x16 of 32.0 GT/s x16, virtio without link files."""
    devices = []
    with open(fixture_path('real', 'h200x4-vm', 'pci_link_sysfs.txt')) as handle:
        for line in handle:
            bdf, rest = line.split(' ', 1)
            values = dict((k, v.strip("'")) for k, v in re.findall(r"(\w+)=('[^']*'|absent)", rest))
            devices.append((bdf, None, values['class'], dict((k, v) for k, v in values.items()
                                                             if k in _pcie.LINK_FILES and v != 'absent')))
    sysroot = _tree(str(tmp_path), devices)
    gpus = [bdf for bdf, _p, cls, _l in devices if cls == '0x030200']
    links = _links(sysroot, gpus=gpus)
    assert [(l['upstream'], l['downstream'], l['speed_gts'], l['width'], l['capable_speed_gts'], l['capable_width'], l['degraded'],
             l['gpu_idle_speed'], l['gbps']) for l in links] == [
        (None, bdf, 32.0, 16, 32.0, 16, False, False, 504.112) for bdf in ('0000:00:06.0', '0000:00:07.0', '0000:00:08.0', '0000:00:09.0')]
    assert _pcie.read_link_attrs(sysroot, '0000:00:03.0') == {
        'raw': dict.fromkeys(_pcie.LINK_FILES), 'speed': None, 'width': None, 'max_speed': None, 'max_width': None}


# ---------------------------------------------------------------------------- simulated nodes

def _sim(tmp_path, profile_name, fault=None, target=None):
    profile = render.load_profile(profile_name)
    context = faults.apply(profile, fault, target) if fault else {}
    render.render(profile, str(tmp_path))
    sysroot = SysRoot(str(tmp_path))
    return read_gdr(sysroot, list_rdma_devices(sysroot)), context, sysroot


def test_sim_links_follow_the_port_types(tmp_path):
    gdr, _ctx, sysroot = _sim(tmp_path, 'nvidia_h100_8x_ndr')
    by_down = dict((l['downstream'], l) for l in gdr['pcie_links'])
    # Root port 15:01.0 -> switch 16:00.0 -> 17:00.0 -> switch 18:00.0 -> 19:00.0/19:01.0 -> GPU0 / mlx5_0.
    assert [(l['upstream'], l['downstream'], l['kind'], l['device']) for l in gdr['pcie_links'][:4]] == [
        ('0000:15:01.0', '0000:16:00.0', 'bridge', None), ('0000:17:00.0', '0000:18:00.0', 'bridge', None),
        ('0000:19:00.0', '0000:1a:00.0', 'gpu', 'GPU0'), ('0000:19:01.0', '0000:1b:00.0', 'nic', 'mlx5_0')]
    assert by_down['0000:16:00.0']['gpus'] == ['GPU0', 'GPU1'] and by_down['0000:16:00.0']['nics'] == ['mlx5_0', 'mlx5_1']
    assert all(l['degraded'] is False and l['by'] == 'port type' for l in gdr['pcie_links'])
    assert len(gdr['pcie_links']) == 8 + 9 + 4 * 3   # each GPU and HCA, and three switch links under each GPU host bridge
    assert not any('PCIe link' in n for n in gdr['notes'])
    # The rendered config space carries the PCI Express port types (root only: 64 bytes otherwise).
    config = sysroot.binary('/sys/bus/pci/devices/0000:15:01.0/config')
    assert _pcie.express_type(config) == _pcie.TYPE_ROOT_PORT
    assert _pcie.express_type(sysroot.binary('/sys/bus/pci/devices/0000:16:00.0/config')) == _pcie.TYPE_UPSTREAM
    assert _pcie.express_type(sysroot.binary('/sys/bus/pci/devices/0000:17:00.0/config')) == _pcie.TYPE_DOWNSTREAM
    assert _pcie.express_type(sysroot.binary('/sys/bus/pci/devices/0000:1b:00.0/config')) == _pcie.TYPE_ENDPOINT
    assert _pcie.express_type(config[:64]) is None and _pcie.express_type(b'') is None


def test_sim_without_port_types_goes_by_position(tmp_path):
    gdr, _ctx, sysroot = _sim(tmp_path, 'nvidia_h100_8x_ndr', 'pcie_link_degraded')
    pci = _pci.read_pci(sysroot)
    # As a non-root reader sees it: 64 bytes of config space, no PCI Express capability.
    sysroot.binary = lambda rel, size=4096: b'\0' * 64
    links = _pcie.read_links(sysroot, pci, gdr['gpus'], gdr['nics'])
    assert [(l['upstream'], l['downstream']) for l in links] == [(l['upstream'], l['downstream']) for l in gdr['pcie_links']]
    assert set(l['by'] for l in links) == set(['position'])
    assert [l['downstream'] for l in links if l['degraded']] == ['0000:1b:00.0']


def test_sim_fault_both_ends_show_it(tmp_path):
    gdr, ctx, sysroot = _sim(tmp_path, 'nvidia_h100_8x_ndr', 'pcie_link_degraded', 'mlx5_2')
    assert ctx == {'hca': 'mlx5_2', 'bdf': '0000:3d:00.0', 'width': 8}
    [link] = [l for l in gdr['pcie_links'] if l['degraded']]
    assert (link['downstream'], link['upstream'], link['width'], link['capable_width'], link['nics']) == \
        ('0000:3d:00.0', '0000:3b:01.0', 8, 16, ['mlx5_2'])
    # The downstream port above reads the same link status (PCIe: both ends of a link report it).
    assert sysroot.text('/sys/bus/pci/devices/0000:3b:01.0/current_link_width') == '8'
    assert sysroot.text('/sys/bus/pci/devices/0000:3d:00.0/current_link_speed') == '32.0 GT/s PCIe'
    assert any('PCIe link 0000:3b:01.0 -> 0000:3d:00.0 (mlx5_2) runs at 32.0 GT/s x8' in n for n in gdr['notes'])


def test_sim_homelab_gen4_gpu_in_gen3_slot(tmp_path):
    gdr, _ctx, _s = _sim(tmp_path, 'homelab_cx4')
    gpu = [l for l in gdr['pcie_links'] if l['kind'] == 'gpu'][0]
    assert (gpu['speed_gts'], gpu['max_speed_gts'], gpu['upstream_max_speed_gts'], gpu['capable_speed_gts'], gpu['degraded']) == \
        (8.0, 16.0, 8.0, 8.0, False)


# ---------------------------------------------------------------------------- IOMMU

ASOKOLSKY = ('BOOT_IMAGE=/boot/vmlinuz-6.8.0-49-generic root=UUID=9ff8c203-950b-4f46-8c41-6e994151ecd3 ro quiet splash')


@pytest.mark.parametrize('cmdline, params, mode', [
    # asokolsky/asokolsky.github.io hardware/duo/iommu.md: a desktop booted without IOMMU parameters.
    (ASOKOLSKY, {}, None),
    # The kernel parameters NVIDIA's Triton/NIM guides and the GPU-direct recipes give.
    ('BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt', {'intel_iommu': 'on', 'iommu': 'pt'}, 'passthrough'),
    ('ro amd_iommu=on iommu=pt pci=realloc', {'amd_iommu': 'on', 'iommu': 'pt'}, 'passthrough'),
    ('ro iommu.passthrough=1', {'iommu.passthrough': '1'}, 'passthrough'),
    ('ro iommu.passthrough=0 iommu.strict=1', {'iommu.passthrough': '0', 'iommu.strict': '1'}, 'translated'),
    ('ro iommu=nopt', {'iommu': 'nopt'}, 'translated'),
    ('ro intel_iommu=off', {'intel_iommu': 'off'}, 'off'),
    ('ro iommu=pt iommu=nopt', {'iommu': 'nopt'}, 'translated'),     # the last one wins
    ('ro quiet -- iommu=pt', {}, None),                                # after '--': init's arguments
    ('', {}, None), (None, {}, None),
])
def test_cmdline(cmdline, params, mode):
    assert _pcie.parse_cmdline(cmdline) == params
    assert _pcie.cmdline_mode(params) == mode


def test_iommu_of_simulated_nodes(tmp_path):
    gdr, _ctx, _s = _sim(tmp_path / 'pt', 'nvidia_h100_8x_ndr')
    iommu = gdr['iommu']
    assert (iommu['mode'], iommu['cmdline_mode'], iommu['translated']) == ('passthrough', 'passthrough', [])
    assert iommu['units'] == ['dmar0', 'dmar1', 'dmar2', 'dmar3', 'dmar4']
    assert iommu['devices'][0]['name'] == 'GPU0' and iommu['devices'][0]['type'] == 'identity'
    assert all(d['group'].isdigit() for d in iommu['devices'])
    gdr, _ctx, _s = _sim(tmp_path / 'dma', 'nvidia_h100_8x_ndr', 'iommu_translated')
    assert (gdr['iommu']['mode'], gdr['iommu']['cmdline'], len(gdr['iommu']['translated'])) == ('translated', {'intel_iommu': 'on'}, 17)
    assert set(d['type'] for d in gdr['iommu']['devices']) == set(['DMA-FQ'])
    assert any('the IOMMU translates the DMA of GPU0' in n for n in gdr['notes'])
    gdr, _ctx, _s = _sim(tmp_path / 'vm', 'h200x2_no_rdma')
    assert (gdr['iommu']['mode'], gdr['iommu']['units'], [d['mode'] for d in gdr['iommu']['devices']]) == ('off', [], ['none', 'none'])
    gdr, _ctx, _s = _sim(tmp_path / 'amd', 'amd_mi300x_roce')
    assert gdr['iommu']['units'][0] == 'ivhd0' and gdr['iommu']['cmdline'] == {'amd_iommu': 'on', 'iommu': 'pt'}


def test_iommu_without_type_file_and_vfio(tmp_path):
    """A kernel before the type attribute (v5.4): the command line decides; a group bound to VFIO is 'vfio'."""
    root = str(tmp_path)
    sysroot = _tree(root, [('0000:01:00.0', None, '0x030200', {}), ('0000:02:00.0', None, '0x020700', {})])
    _write(root, '/proc/cmdline', 'ro intel_iommu=on iommu=pt')
    for group, bdf in ((3, '0000:01:00.0'), (4, '0000:02:00.0')):
        os.makedirs(os.path.join(root, 'sys/kernel/iommu_groups/%d/devices' % group))
        os.symlink('../../../kernel/iommu_groups/%d' % group, os.path.join(root, 'sys/devices/pci0000:00', bdf, 'iommu_group'))
    _write(root, '/sys/kernel/iommu_groups/4/type', 'unmanaged')
    iommu = _pcie.read_iommu(sysroot, [{'name': 'GPU0', 'pci_address': '0000:01:00.0'}],
                             [{'name': 'mlx5_0', 'pci_address': '0000:02:00.0'}])
    assert [(d['name'], d['group'], d['type'], d['mode']) for d in iommu['devices']] == [
        ('GPU0', '3', None, 'passthrough'), ('mlx5_0', '4', 'unmanaged', 'vfio')]
    assert (iommu['mode'], iommu['translated']) == ('mixed', [])
    _write(root, '/proc/cmdline', 'ro quiet')
    assert _pcie.read_iommu(SysRoot(root), [{'name': 'GPU0', 'pci_address': '0000:01:00.0'}], [])['mode'] == 'unknown'
