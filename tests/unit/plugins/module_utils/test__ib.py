# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.unit.conftest import fixture_text, sysfs_ib_tree


@pytest.mark.parametrize('text, expected', [
    ('400 Gb/sec (4X NDR)', (400.0, '4X', 'NDR')),
    ('200 Gb/sec (2X NDR)', (200.0, '2X', 'NDR')),      # BlueField-3 bond, gpud capture
    ('10 Gb/sec (4X)', (10.0, '4X', None)),            # iWARP i40iw: no speed name
    ('25 Gb/sec (1X EDR)', (25.0, '1X', 'EDR')),
    ('2.5 Gb/sec (1X SDR)', (2.5, '1X', 'SDR')),
    ('40 Gb/sec (4X FDR10)', (40.0, '4X', 'FDR10')),
    ('53.125 Gb/sec (1X HDR)', (53.125, '1X', 'HDR')),
    ('garbage', (None, None, None)),
    ('', (None, None, None)),
    (None, (None, None, None)),
])
def test_parse_rate(text, expected):
    assert _ib.parse_rate(text) == expected


@pytest.mark.parametrize('text, expected', [
    ('4: ACTIVE', (4, 'ACTIVE')),
    ('5: LinkUp', (5, 'LinkUp')),
    ('3: Disabled', (3, 'Disabled')),
    ('ACTIVE', (None, 'ACTIVE')),
    (None, (None, None)),
])
def test_parse_state(text, expected):
    assert _ib.parse_state(text) == expected


@pytest.mark.parametrize('gid, expected', [
    # seed 000 show_gids: mlx5_2 index 2 -> 10.7.96.17
    ('0000:0000:0000:0000:0000:ffff:0a07:6011', '10.7.96.17'),
    ('fe80:0000:0000:0000:c670:bdff:feb9:317a', None),
    ('0000:0000:0000:0000:0000:ffff:zzzz:6011', None),
    (None, None),
])
def test_gid_ipv4(gid, expected):
    assert _ib.gid_ipv4(gid) == expected


@pytest.mark.parametrize('mtu, expected', [(9000, 4096), (4200, 4096), (4150, 2048), (1500, 1024), (300, None), (None, None)])
def test_roce_active_mtu(mtu, expected):
    assert _ib.roce_active_mtu(mtu) == expected


def test_parse_counters_saturation_and_unavailable():
    counters, saturated, unavailable = _ib.parse_counters({
        'link_downed': '255', 'symbol_error': '65535', 'port_rcv_errors': '14',
        'port_xmit_data': '4294967295', 'VL15_dropped': 'N/A (no PMA)'})
    assert counters['link_downed'] == 255
    assert saturated == ['link_downed', 'symbol_error']   # port_xmit_data is 64-bit, not saturated
    assert unavailable == ['VL15_dropped'] and counters['VL15_dropped'] is None


def test_parse_ibv_devinfo_fixture():
    mtus = _ib.parse_ibv_devinfo(fixture_text('public', 'ibv_devinfo', 'heioy_mlx4_2hca_port2_down.txt'))
    assert mtus[('mlx4_1', 1)] == 4096
    assert set(h for h, _p in mtus) == {'mlx4_0', 'mlx4_1'}
    assert len(mtus) == 4


def test_parse_ibv_devinfo_verbose_fixture():
    mtus = _ib.parse_ibv_devinfo(fixture_text('public', 'ibv_devinfo', 'heioy_mlx4_v_port2_polling_sdr.txt'))
    assert list(mtus) == [('mlx4_1', 2)]


def _read(tmp_path, name):
    sysroot = SysRoot(sysfs_ib_tree(name, str(tmp_path)))
    devices = _ib.read_ib(sysroot)
    return {d['name']: d for d in devices}, sysroot


def test_gpud_h100_capture(tmp_path):
    devices, sysroot = _read(tmp_path, 'gpud_h100_8x_ndr_plus_bond.txt')
    assert sorted(devices) == ['mlx5_0', 'mlx5_1', 'mlx5_4', 'mlx5_5', 'mlx5_6', 'mlx5_7', 'mlx5_8', 'mlx5_9', 'mlx5_bond_0']
    port = devices['mlx5_0']['ports'][0]
    assert (port['state'], port['state_code'], port['phys_state'], port['rate_gbps'], port['width'], port['speed']) == \
        ('ACTIVE', 4, 'LinkUp', 400.0, '4X', 'NDR')
    assert port['link_layer'] == 'InfiniBand'
    assert port['counters']['port_rcv_errors'] == 14
    assert port['counters']['port_rcv_data'] == 230539874932483
    assert port['hw_counters']['rx_write_requests'] == 3809045607
    # link_downed (8 bit) at 255 on the flapping link; excessive_buffer_overrun_errors is a
    # 4-bit field and reads 15 on every port of this capture: saturated too.
    assert devices['mlx5_1']['ports'][0]['counters_saturated'] == ['excessive_buffer_overrun_errors', 'link_downed']
    assert devices['mlx5_0']['ports'][0]['counters_saturated'] == ['excessive_buffer_overrun_errors']
    bond = devices['mlx5_bond_0']['ports'][0]
    assert (bond['link_layer'], bond['rate_gbps'], bond['width']) == ('Ethernet', 200.0, '2X')
    assert devices['mlx5_0']['hca_type'] == 'MT4129' and devices['mlx5_bond_0']['fw_ver'] == '32.38.3056'
    # The capture has no device links: PCI address and NUMA node are unknown, not an error.
    assert devices['mlx5_0']['pci_address'] is None and devices['mlx5_0']['numa_node'] is None
    assert sysroot.warnings == []


def test_iwarp_rate_without_speed_and_no_pma(tmp_path):
    devices, _sysroot = _read(tmp_path, 'node_exporter_i40iw0_iwarp.txt')
    port = devices['i40iw0']['ports'][0]
    assert (port['rate_gbps'], port['width'], port['speed']) == (10.0, '4X', None)
    assert port['counters']['symbol_error'] is None
    assert 'symbol_error' in port['counters_unavailable'] and len(port['counters_unavailable']) == 17


def test_omnipath(tmp_path):
    devices, _sysroot = _read(tmp_path, 'procfs_hfi1_0_opa.txt')
    port = devices['hfi1_0']['ports'][0]
    assert (port['state'], port['phys_state'], port['rate_gbps'], port['speed']) == ('ACTIVE', 'LinkUp', 100.0, 'EDR')
    assert port['hw_counters'] == {}
    assert devices['hfi1_0']['board_id'].startswith('HPE 100Gb 1-port OP101')


def test_degraded_width_and_odd_phys_state(tmp_path):
    devices, _sysroot = _read(tmp_path, 'procfs_mlx5_0_1x_edr_hwcounters.txt')
    port = devices['mlx5_0']['ports'][0]
    assert (port['rate_gbps'], port['width']) == (25.0, '1X')
    assert (port['phys_state_code'], port['phys_state']) == (4, 'ACTIVE')
    assert port['hw_counters']['req_cqe_error'] == 3481
    assert devices['mlx5_0']['node_guid'] == '0a7f:bc12:45ef:d23b'


def test_two_ports_trailing_blank_line(tmp_path):
    devices, _sysroot = _read(tmp_path, 'procfs_mlx4_0_qdr_2port.txt')
    ports = devices['mlx4_0']['ports']
    assert [p['port'] for p in ports] == [1, 2]
    assert [p['link_layer'] for p in ports] == ['InfiniBand', 'InfiniBand']
    assert ports[1]['counters']['port_xmit_wait'] == 3846


def test_counters_ext(tmp_path):
    devices, _sysroot = _read(tmp_path, 'node_exporter_mlx4_0_counters_ext.txt')
    counters = devices['mlx4_0']['ports'][0]['counters']
    assert any(name.endswith('_64') for name in counters)


def test_no_rdma_node(tmp_path):
    assert _ib.read_ib(SysRoot(str(tmp_path))) == []


def test_bad_files_give_null_and_warning(tmp_path):
    root = sysfs_ib_tree('procfs_hfi1_0_opa.txt', str(tmp_path))
    port = os.path.join(root, 'sys/class/infiniband/hfi1_0/ports/1')
    with open(os.path.join(port, 'rate'), 'w') as handle:
        handle.write('fast\n')
    os.remove(os.path.join(port, 'state'))
    os.makedirs(os.path.join(port, 'state'))        # a directory where a file should be: EISDIR
    with open(os.path.join(port, 'counters/symbol_error'), 'w') as handle:
        handle.write('12x\n')
    sysroot = SysRoot(root)
    port_facts = _ib.read_ib(sysroot)[0]['ports'][0]
    assert port_facts['rate_gbps'] is None and port_facts['rate'] == 'fast'
    assert port_facts['state'] is None
    assert port_facts['counters']['symbol_error'] is None
    assert port_facts['phys_state'] == 'LinkUp'        # the healthy parts are still there
    assert any('rate' in w and 'fast' in w for w in sysroot.warnings)
    assert any('/state' in w for w in sysroot.warnings)


def test_simulated_roce_port(sim_root):
    root, _ctx = sim_root('metax_c500_cx7')
    devices = {d['name']: d for d in _ib.read_ib(SysRoot(root))}
    port = devices['mlx5_2']['ports'][0]
    assert devices['mlx5_2']['pci_address'] == '0000:57:00.0' and devices['mlx5_2']['numa_node'] == 0
    assert port['netdev'] == 'net1' and port['netdev_mtu'] == 9000 and port['netdev_operstate'] == 'up'
    assert (port['active_mtu'], port['active_mtu_source']) == (4096, 'netdev_mtu')
    # seed 000 show_gids for mlx5_2 (v1/v2 pairs of the link-local and the IPv4-mapped GID)
    assert [(g['index'], g['gid'], g['type'], g['ipv4']) for g in port['gids']] == [
        (0, 'fe80:0000:0000:0000:c670:bdff:feb9:317a', 'IB/RoCE v1', None),
        (1, 'fe80:0000:0000:0000:c670:bdff:feb9:317a', 'RoCE v2', None),
        (2, '0000:0000:0000:0000:0000:ffff:0a07:6011', 'IB/RoCE v1', '10.7.96.17'),
        (3, '0000:0000:0000:0000:0000:ffff:0a07:6011', 'RoCE v2', '10.7.96.17'),
    ]
    ib_port = devices['mlx5_0']['ports'][0]
    assert ib_port['netdev'] == 'ib0' and ib_port['lid'] == 0x0e and ib_port['sm_lid'] == 1
    assert ib_port['gids'][0]['gid'] == 'fe80:0000:0000:0000:a088:c203:005a:ab6c'
    assert ib_port['active_mtu'] is None      # IB active MTU is not in sysfs: only from ibv_devinfo
