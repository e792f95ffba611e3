# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every perftest and ibv_devinfo output kept under tests/fixtures/public, read with the
values a person reads in it; and inputs no parser may choke on."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ib, _perftest
from tests.unit.conftest import fixture_path, fixture_text

MIB = 8.0 * 2 ** 20 / 1e9  # one MiB/s (perftest's MB/s too) in Gb/s


def mib(value):
    return round(value * MIB, 6)


# name: (test from the banner, units, rows, summary {key: value}, failure kind or None,
#        failure message or None, settings subset)
# The summary is that of summarize(): bandwidth at the largest size, latency at the
# smallest; rows of one size averaged (two processes printing into one terminal too).
PERFTEST = {
    'aks_ib_read_bw_hdr_sweep_gbits.txt': (None, 'Gb/sec', 23, {'bytes': 8388608, 'bw_avg_gbps': 197.48}, None, None, {}),
    'aks_ib_read_lat_hdr_vf.txt': (None, None, 1, {'bytes': 2, 'lat_avg_us': 5.5, 'lat_typical_us': 5.49, 'lat_p999_us': 11.78},
                                   None, None, {}),
    'aks_ib_write_bw_hdr_sweep_gbits.txt': (None, 'Gb/sec', 23, {'bytes': 8388608, 'bw_avg_gbps': 196.55}, None, None, {}),
    'deepops_roce_ib_write_bw_rdma_cm_cpufreq_warn.txt': ('ib_write_bw', 'Gb/sec', 1, {'bytes': 65536, 'bw_avg_gbps': 92.4}, None, None,
                                                          {'link_type': 'Ethernet', 'gid_index': 3, 'rdma_cm': True}),
    'dgx_spark_ib_write_bw_run_infinitely_roce.txt': ('ib_write_bw', 'Gb/sec', 5,
                                                      {'bytes': 65536, 'rows': 5, 'bw_avg_gbps': 92.568, 'bw_peak_gbps': None},
                                                      None, None, {'mtu_bytes': 1024}),
    'seed000_metax_ib_write_bw_host_sweep.txt': ('ib_write_bw', 'Gb/sec', 23, {'bytes': 8388608, 'bw_avg_gbps': 392.25}, None, None,
                                                 {'memory': 'host'}),
    'seed000_metax_ib_write_bw_maca0_sweep.txt': ('ib_write_bw', 'Gb/sec', 23, {'bytes': 8388608, 'bw_avg_gbps': 392.57}, None, None,
                                                  {'memory': 'maca'}),
    'seed000_metax_ib_write_bw_maca4_cross_sweep.txt': ('ib_write_bw', 'Gb/sec', 23, {'bytes': 8388608, 'bw_avg_gbps': 392.51}, None,
                                                        None, {'memory': 'maca', 'device': 'mlx5_1'}),
    'seed001_cuda_ib_write_bw_mib.txt': ('ib_write_bw', 'MiB/sec', 1, {'bytes': 65536, 'bw_avg_gbps': mib(10621.97)}, None, None,
                                         {'memory': 'cuda'}),
    'seed001_rocm_ib_write_bw_mib.txt': ('ib_write_bw', 'MiB/sec', 1, {'bytes': 65536, 'bw_avg_gbps': mib(11030.90)}, None, None,
                                         {'memory': 'rocm'}),
    'seed002_homelab_ib_send_bw_collapsed.txt': ('ib_send_bw', 'MiB/sec', 1, {'bytes': 2, 'bw_avg_gbps': mib(7.40)}, None, None,
                                                 {'pcie_relaxed_ordering': True}),
    # Old CUDA banner: 'There are 2 devices supporting CUDA, picking first...' is device 0.
    'perftest31_cuda_k80_old_banner_mr_failed.txt': (None, None, 0, {}, 'mr_failed', "Couldn't allocate MR",
                                                     {'memory': 'cuda', 'gpu': {'vendor': 'cuda', 'index': 0, 'name': 'Tesla K80',
                                                                                'pci_bus_id': None}}),
    'perftest126_cuda_a30_rdma_cm_mr_failed_segfault.txt': (None, None, 0, {}, 'mr_failed', "Couldn't allocate MR",
                                                            {'memory': 'cuda', 'gpu': {'vendor': 'cuda', 'index': 0,
                                                                                       'name': 'NVIDIA A30-8C', 'pci_bus_id': None}}),
    'perftest346_cuda_integrated_mr_error14.txt': (None, None, 0, {}, 'mr_failed', "Couldn't allocate MR with error=14",
                                                   {'memory': 'cuda'}),
    # The option conflict, not the generic parser line, is the message.
    'perftest336_dmabuf_before_cuda_parser_error.txt': (None, None, 0, {}, 'bad_arguments', 'CUDA DMA-BUF cannot be used without CUDA',
                                                        {}),
    'perftest393_grh_required_modify_qp_rtr.txt': (None, None, 0, {}, 'qp_transition_failed', 'Failed to modify QP 122273 to RTR', {}),
    # The rdma_cm client chain after it would read as connect_failed.
    'perftest26_cxgb4_rdma_cm_mr_failed.txt': (None, None, 0, {}, 'mr_failed', "Couldn't allocate MR", {}),
    # 'Gid index' of old perftest.
    'softiwarp23_siw_iw_gid_index_lowercase_mr_failed.txt': ('ib_send_bw', None, 0, {}, 'mr_failed', "Couldn't allocate MR",
                                                             {'gid_index': 0, 'transport': 'IW', 'device': 'siw_ens33',
                                                              'memory': 'host'}),
    'pib4_ib_atomic_bw_cmp_and_swap_mb.txt': ('ib_atomic_bw', 'MB/sec', 1, {'bytes': 8, 'bw_avg_gbps': mib(1.67)}, None, None,
                                              {'title': 'Atomic CMP_AND_SWAP BW Test', 'outstanding_reads': 16}),
    'pib3_ib_read_bw_server_read_keys_failed.txt': ('ib_read_bw', 'MB/sec', 0, {}, 'exchange_failed', "Couldn't read remote address",
                                                    {'device': 'pib_0'}),
    # Markdown quote before every line; the paste stops after the 8-byte row.
    'perftest132_gbits_sweep_markdown_quoted.txt': ('ib_write_bw', 'Gb/sec', 3, {'bytes': 8, 'bw_avg_gbps': 0.17}, None, None,
                                                    {'device': 'mlx5_0', 'mtu_bytes': 4096}),
    'spiderpool_ib_read_lat_macvlan_roce_indented.txt': ('ib_read_lat', None, 1,
                                                         {'bytes': 2, 'lat_avg_us': 7.06, 'lat_typical_us': 7.04, 'lat_p999_us': 16.81},
                                                         None, None, {'gid_index': 12, 'link_type': 'Ethernet'}),
    'spiderpool_ib_read_lat_sriov_libibverbs_warnings.txt': ('ib_read_lat', None, 1,
                                                             {'bytes': 2, 'lat_avg_us': 6.82, 'lat_max_us': 20.37}, None, None,
                                                             {'gid_index': 2, 'device': 'mlx5_5'}),
    # Server and client in one terminal: both 65536-byte rows are read (and averaged).
    'wayca_hns_ib_send_bw_rc_server_client_interleaved.txt': ('ib_send_bw', 'MB/sec', 2,
                                                              {'bytes': 65536, 'rows': 2, 'bw_avg_gbps': mib((22724.01 + 22651.04) / 2),
                                                               'bw_peak_gbps': mib(22727.48)},
                                                              None, None, {'device': 'roceo1', 'connection_type': 'RC'}),
    'wayca_hns_ib_send_bw_ud_two_rows_one_line.txt': ('ib_send_bw', 'MB/sec', 2,
                                                      {'bytes': 1024, 'rows': 2, 'bw_avg_gbps': mib((7876.21 + 7630.57) / 2)},
                                                      None, None, {'connection_type': 'UD', 'mtu_bytes': 1024}),
    'wayca_hns_ib_write_bw_xrc_banner_scrambled.txt': ('ib_write_bw', 'MB/sec', 2, {'bytes': 65536, 'bw_avg_gbps': mib(22704.79)},
                                                       None, None, {'connection_type': 'XRC', 'srq': True}),
}

# name: {(hca, port): active_mtu}
IBV_DEVINFO = {
    'heioy_mlx4_2hca_port2_down.txt': {('mlx4_0', 1): 4096, ('mlx4_0', 2): 4096, ('mlx4_1', 1): 4096, ('mlx4_1', 2): 4096},
    'heioy_mlx4_v_port2_polling_sdr.txt': {('mlx4_1', 2): 4096},
    'wayca_hns_roceo1_roce_mtu1024.txt': {('roceo1', 1): 1024},
    'tensorflow_gdr_mlx4_device_ports_roce.txt': {('mlx4_0', 1): 1024, ('mlx4_0', 2): 1024},
    # mlx5_1 is cut off before its port block.
    'deepep60_cx7_ib_port_down_lid65535_truncated.txt': {('mlx5_0', 1): 4096},
    'deepep223_cx6dx_roce_and_cx6_ib_mixed.txt': {('mlx5_0', 1): 1024, ('mlx5_1', 1): 1024, ('mlx5_2', 1): 4096},
    'deepep137_h20_roce_bond.txt': {('mlx5_bond_0', 1): 4096},
}


def _header_lines(kind, name):
    with open(fixture_path('public', kind, name)) as handle:
        head = [handle.readline(), handle.readline()]
    return head


@pytest.mark.parametrize('kind, names', [('perftest', PERFTEST), ('ibv_devinfo', IBV_DEVINFO)])
def test_no_file_is_left_out(kind, names):
    assert sorted(os.listdir(fixture_path('public', kind))) == sorted(names)


@pytest.mark.parametrize('kind, name', [('perftest', n) for n in sorted(PERFTEST)] + [('ibv_devinfo', n) for n in sorted(IBV_DEVINFO)])
def test_every_file_says_where_it_comes_from(kind, name):
    source, note = _header_lines(kind, name)
    assert source.startswith('## source: ') and '/' in source.split()[2]
    assert note.startswith('## note: ') and len(note) > 40


@pytest.mark.parametrize('name', sorted(PERFTEST))
def test_perftest_file(name):
    test, units, rows, summary, kind, message, settings = PERFTEST[name]
    parsed = _perftest.parse_output(fixture_text('public', 'perftest', name))
    assert parsed['test'] == test
    assert parsed['units'] == units
    assert len(parsed['results']) == rows
    got = _perftest.summarize(parsed['results'], test)
    assert dict((k, got.get(k)) for k in summary) == summary
    assert dict((k, parsed['settings'].get(k)) for k in settings) == settings
    status, failure = _perftest.outcome(parsed, None)
    if kind is None:
        assert (status, failure, parsed['error'], parsed['unread']) == ('ok', None, None, [])
    else:
        assert (status, failure['kind'], failure['message']) == ('failed', kind, message)


@pytest.mark.parametrize('name', sorted(IBV_DEVINFO))
def test_ibv_devinfo_file(name):
    assert _ib.parse_ibv_devinfo(fixture_text('public', 'ibv_devinfo', name)) == IBV_DEVINFO[name]


def test_ibv_devinfo_of_a_node_without_rdma_has_no_port():
    # rdma-core ibv_devinfo on a VM without RDMA (stderr only).
    text = fixture_text('real', 'cpu-vm-no-rdma', 'ibv_devinfo.txt')
    assert 'Failed to get IB devices list' in text
    assert _ib.parse_ibv_devinfo(text) == {}


def test_markdown_quote_reads_like_the_plain_output():
    quoted = fixture_text('public', 'perftest', 'perftest132_gbits_sweep_markdown_quoted.txt')
    plain = '\n'.join(line[2:] for line in quoted.splitlines())
    assert _perftest.parse_output(quoted)['results'] == _perftest.parse_output(plain)['results']
    assert _perftest.parse_output(quoted)['results'][-1] == {'bytes': 8, 'iterations': 5000, 'bw_peak_gbps': 0.17,
                                                             'bw_avg_gbps': 0.17, 'msg_rate_mpps': 2.641399}


def test_a_row_cut_short_is_named_by_line():
    text = fixture_text('public', 'perftest', 'deepops_roce_ib_write_bw_rdma_cm_cpufreq_warn.txt')
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ['65536'])
    cut = '\n'.join(lines[:row] + [lines[row][:30]]) + '\n'
    parsed = _perftest.parse_output(cut)
    assert parsed['results'] == []
    status, failure = _perftest.outcome(parsed, None)
    assert status == 'failed' and failure['kind'] == 'unparsed'
    assert failure['message'].startswith('line %d of the result table could not be read (3 values for the 5 columns' % (row + 1))


def test_a_header_without_rows_is_named_by_line():
    text = fixture_text('public', 'perftest', 'aks_ib_read_lat_hdr_vf.txt').splitlines()[:2]
    status, failure = _perftest.outcome(_perftest.parse_output('\n'.join(text)), 0, 'client')
    assert (status, failure['message']) == ('failed', 'the result table header on line 2 has no rows (output cut short?)')


HEADER = ' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n'


@pytest.mark.parametrize('text, reason', [
    (HEADER + ' 65536 5000 ' + '9' * 400 + ' 92.40 0.17\n', 'number out of range (400 characters)'),
    (HEADER + ' 65536 5000 1e999 92.40 0.17\n', 'not a number: 1e999'),
    (HEADER + ' 65536 5000 92.42 92.40\x00 0.17\n', 'not a number: 92.40\x00'),
    (HEADER + ' ' + '9' * 5000 + ' 5000 92.42 92.40 0.17\n', 'number out of range (5000 characters)'),
])
def test_damaged_rows_are_reported_not_guessed(text, reason):
    parsed = _perftest.parse_output(text)
    assert parsed['results'] == []
    assert parsed['unread'][0]['line'] == 2 and parsed['unread'][0]['reason'].startswith(reason)


@pytest.mark.parametrize('text', [
    '\x00' * 100,
    ' Mtu             : ' + '9' * 5000 + '[B]\n GID index       : ' + '9' * 5000 + '\n',
    'Picking device No. ' + '9' * 5000 + '\n',
    'Using cuda Device with ID: ' + '9' * 5000 + ', Name: x, PCI Bus ID: 0x1\n',
    '#bytes\n' + '1 ' * 3000,
    HEADER[:40],
    HEADER + ' 2',
    '> ' * 1000 + HEADER,
])
def test_no_input_raises(text):
    parsed = _perftest.parse_output(text, text)
    _perftest.summarize(parsed['results'], parsed['test'])
    assert _perftest.outcome(parsed, None)[0] == 'failed'
    assert _perftest.outcome(parsed, 1, 'client', text)[0] == 'failed'


@pytest.mark.parametrize('text, expected', [
    ('hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tactive_mtu:\t\t' + '9' * 5000 + ' (5)\n', {}),
    ('hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tactive_mtu:\t\t1e999\n', {}),
    ('hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tactive_mtu:\n', {}),
    ('hca_id:\n\t\tport:\t1\n\t\t\tactive_mtu:\t\t4096 (5)\n', {}),
    ('\x00hca_id:\tmlx5_0\x00\n\t\tport:\t1\n\t\t\tactive_mtu:\t\t4096 (5)\n', {}),
    # A paste that lost its line breaks after the HCA name.
    ('hca_id: mlx5_0        transport:   InfiniBand (0)\n  port:   1\n   active_mtu:   2048 (4)\n', {('mlx5_0', 1): 2048}),
    (None, {}),
])
def test_ibv_devinfo_damaged(text, expected):
    assert _ib.parse_ibv_devinfo(text) == expected
