# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""_nccl: the text and JSON parsers on captured outputs, the transport, failures, command lines."""

from __future__ import annotations

import json

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _nccl
from tests.unit.conftest import fixture_text

# (fixture parts, rows, avg, max busbw, wrong_total, ranks, hosts, columns, first row)
CASES = [
    (('public', 'nccl_tests', 'a3mega_h100_allreduce_2node_16rank.txt'), 31, 70.742, 338.82, 0, 16, 2,
     {'root': True, 'check': 'wrong'}, (8, 2, 'float', 'sum', -1, 135.8, 0.0, 0, 123.5)),
    (('public', 'nccl_tests', 'aks_allreduce_ipoib_no_rdma_slow.txt'), 16, 1.38997, 3.17, None, 0, 0,
     {'root': True, 'check': 'wrong'}, (8, 2, 'float', 'sum', -1, 82.21, 0.0, None, 79.73)),
    (('public', 'nccl_tests', 'aks_allreduce_sriov_ib_na_wrong.txt'), 16, 56.3994, 187.22, None, 0, 0,
     {'root': True, 'check': 'wrong'}, (8, 2, 'float', 'sum', -1, 99.09, 0.0, None, 36.48)),
    (('public', 'nccl_tests', 'deepops_dgx_a100_2node_k8s_error_col.txt'), 30, 53.7098, 188.7, None, 0, 0,
     {'root': False, 'check': 'error'}, (8, 2, 'float', 'sum', None, 38.63, 0.0, None, 38.85)),
    (('public', 'nccl_tests', 'deepops_dgx_a100_4node_slurm_error_col.txt'), 13, 113.289, 191.56, None, 0, 0,
     {'root': False, 'check': 'error'}, (1048576, 262144, 'float', 'sum', None, 135.3, 15.02, None, 132.7)),
    (('public', 'nccl_tests', 'deepops_roce_sriov_k8s_allreduce_error_col.txt'), 29, 7.76739, 22.92, None, 0, 0,
     {'root': False, 'check': 'error'}, (8, 2, 'float', 'sum', None, 2193.5, 0.0, None, 132.2)),
    (('public', 'nccl_tests', 'gcm_a100_allreduce_1node_8gpu.txt'), 6, 210.99, 231.72, 0, 8, 1,
     {'root': True, 'check': 'wrong'}, (33554432, 8388608, 'float', 'sum', -1, 344.8, 170.31, 0, 349.5)),
    (('public', 'nccl_tests', 'gcm_a100_allreduce_2node_16gpu.txt'), 6, 150.209, 182.8, 0, 16, 2,
     {'root': True, 'check': 'wrong'}, (33554432, 8388608, 'float', 'sum', -1, 650.2, 96.76, 0, 648.4)),
    (('public', 'nccl_tests', 'rocm_sad_rccl_allreduce_mi350x_8gpu.txt'), 31, 111.827, 367.51, 0, 8, 1,
     {'root': True, 'check': 'wrong'}, (8, 2, 'float', 'sum', -1, 58.63, 0.0, 0, 49.68)),
    (('real', 'h200x2', 'all_reduce_perf_g2.txt'), 28, 87.6407, 327.22, 0, 2, 1,
     {'root': True, 'check': 'wrong'}, (8, 2, 'float', 'sum', -1, 18.9, 0.0, 0, 18.2)),
    (('real', 'h200x2', 'all_gather_perf_g2.txt'), 5, 145.668, 254.91, 0, 2, 1,
     {'root': True, 'check': 'wrong'}, (1048576, 131072, 'float', 'none', -1, 19.64, 26.7, 0, 19.56)),
    (('seeds', '000_mccl_allreduce_1node_8gpu.txt'), 21, 29.7818, 65.08, 0, 8, 1,
     {'root': True, 'check': 'wrong'}, (1024, 512, 'bfloat16', 'sum', -1, 15.31, 0.12, 0, 13.91)),
    (('seeds', '000_mccl_allreduce_2node_16gpu_no_gdr.txt'), 21, 4.57073, 8.74, 0, 16, 2,
     {'root': True, 'check': 'wrong'}, (1024, 256, 'float', 'sum', -1, 52.37, 0.04, 0, 51.08)),
    (('seeds', '000_mccl_allreduce_2node_1gpu.txt'), 21, 6.97858, 13.84, 0, 2, 2,
     {'root': True, 'check': 'wrong'}, (1024, 256, 'float', 'sum', -1, 30.12, 0.03, 0, 27.98)),
    (('seeds', '000_mccl_allreduce_2node_16gpu_fixed.txt'), 21, 24.3851, 73.24, 0, 16, 2,
     {'root': True, 'check': 'wrong'}, (1024, 256, 'float', 'sum', -1, 52.73, 0.04, 0, 48.65)),
]


@pytest.mark.parametrize('parts, rows, avg, peak, wrong_total, ranks, hosts, columns, first', CASES,
                         ids=[case[0][-1] for case in CASES])
def test_text_tables(parts, rows, avg, peak, wrong_total, ranks, hosts, columns, first):
    parsed = _nccl.parse_text(fixture_text(*parts))
    assert len(parsed['results']) == rows
    assert parsed['avg_busbw_gbs'] == avg
    assert parsed['max_busbw_gbs'] == peak
    assert parsed['wrong_total'] == wrong_total
    assert len(parsed['ranks']) == ranks
    assert len(parsed['hosts']) == hosts
    assert dict((key, parsed['columns'][key]) for key in ('root', 'check')) == columns
    assert parsed['columns']['redop'] is True and parsed['columns']['source'] == 'header'
    assert parsed['problems'] == []
    assert parsed['out_of_bounds'] == {'count': 0, 'ok': True}
    row = parsed['results'][0]
    assert (row['size_bytes'], row['count'], row['type'], row['redop'], row['root'], row['out_of_place']['time_us'],
            row['out_of_place']['busbw_gbs'], row['out_of_place']['wrong'], row['in_place']['time_us']) == first
    # Sizes grow through the table: no row was lost or read twice.
    sizes = [result['size_bytes'] for result in parsed['results']]
    assert sizes == sorted(set(sizes))
    assert _nccl.outcome(parsed, 0) == ('ok', None)


def test_old_error_column_is_error_not_wrong():
    parsed = _nccl.parse_text(fixture_text('public', 'nccl_tests', 'deepops_dgx_a100_2node_k8s_error_col.txt'))
    first = parsed['results'][0]
    assert first['out_of_place'] == {'time_us': 38.63, 'algbw_gbs': 0.0, 'busbw_gbs': 0.0, 'wrong': None, 'error': 2e-07}
    assert first['in_place']['error'] == 1e-07


def test_devices_new_and_old_forms():
    real = _nccl.parse_text(fixture_text('real', 'h200x2', 'all_reduce_perf_g2.txt'))
    assert real['ranks'][1] == {'rank': 1, 'group': 0, 'pid': 1401, 'host': 'vm', 'device': 1,
                                'bus_id': '0000:00:07', 'name': 'NVIDIA H200'}
    mccl = _nccl.parse_text(fixture_text('seeds', '000_mccl_allreduce_2node_16gpu_no_gdr.txt'))
    assert mccl['ranks'][8] == {'rank': 8, 'group': None, 'pid': 1043923, 'host': '10-7-96-189', 'device': 0,
                                'bus_id': '0x08', 'name': 'MetaX C500'}
    assert mccl['hosts'] == ['10-7-96-17', '10-7-96-189']


def test_header_and_versions_of_the_real_run():
    parsed = _nccl.parse_text(fixture_text('real', 'h200x2', 'all_reduce_perf_g2.txt'))
    assert parsed['header'] == {'threads': 1, 'gpus': 2, 'min_bytes': 8, 'max_bytes': 1073741824, 'step_factor': 2,
                                'step_bytes': None, 'warmup_iters': 1, 'iters': 20, 'agg_iters': 1, 'validation': 1, 'graph': 0}
    assert parsed['versions'] == {'tool': 'nccl-tests', 'tests': '2.19.6', 'headers': 22809, 'library': 22809,
                                  'library_version': '2.28.9+cuda13.0'}
    assert parsed['benchmark'] == 'all_reduce_perf'


def test_rccl_version_line():
    parsed = _nccl.parse_text(fixture_text('public', 'nccl_tests', 'rocm_sad_rccl_allreduce_mi350x_8gpu.txt'))
    assert parsed['versions']['tool'] == 'rccl-tests'
    assert parsed['versions']['tests'] == 'Unknown'
    assert parsed['header']['gpus'] == 8


def test_transport_of_the_real_run_is_socket_without_gdr():
    transport = _nccl.parse_text(fixture_text('real', 'h200x2', 'all_reduce_perf_g2.txt'))['transport']
    assert transport['net'] == 'Socket'
    assert transport['hcas'] == []
    assert transport['gdr'] is False
    assert "vm:1401:1413 [1] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'" in transport['evidence']
    assert 'vm:1401:1413 [1] NCCL INFO Using network Socket' in transport['evidence']


IB_GDR = '\n'.join([
    'n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/RoCE ; OOB ib0:10.0.0.1<0>',
    'n1:1:1 [0] NCCL INFO Using network IB',
    'n1:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/IB/0/GDRDMA',
    'n1:1:2 [0] NCCL INFO Channel 01/0 : 1[1] -> 9[1] [send] via NET/IB/0/GDRDMA',
])


@pytest.mark.parametrize('text, net, hcas, gdr', [
    (IB_GDR, 'IB', ['mlx5_0:1', 'mlx5_3:1'], True),
    (IB_GDR + '\nn2:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 \'mlx5_0\'', 'IB', ['mlx5_0:1', 'mlx5_3:1'], False),
    ('n1:1:1 [0] NCCL INFO Using network IB\nn1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0', 'IB', [], None),
    ('# Avg bus bandwidth    : 1.0', None, [], None),
])
def test_transport_cases(text, net, hcas, gdr):
    transport = _nccl.parse_text(text)['transport']
    assert (transport['net'], transport['hcas'], transport['gdr']) == (net, hcas, gdr)


def test_gdr_channel_evidence_is_deduplicated():
    evidence = _nccl.parse_text(IB_GDR)['transport']['evidence']
    assert len(evidence) == 3


def test_json_and_text_of_the_same_run_give_the_same_numbers():
    text = _nccl.parse_text(fixture_text('real', 'h200x2', 'all_reduce_perf_g2.txt'))
    from_json = _nccl.parse_json(fixture_text('real', 'h200x2', 'all_reduce.json'))
    assert from_json['format'] == 'json'
    assert len(from_json['results']) == 28
    for text_row, json_row in zip(text['results'], from_json['results']):
        assert json_row == text_row
    assert from_json['avg_busbw_gbs'] == text['avg_busbw_gbs'] == 87.6407
    assert from_json['max_busbw_gbs'] == text['max_busbw_gbs']
    assert from_json['out_of_bounds'] == text['out_of_bounds']
    assert from_json['wrong_total'] == text['wrong_total'] == 0
    assert from_json['header'] == text['header']
    assert from_json['versions']['library_version'] == '2.28.9'
    assert from_json['benchmark'] == 'all_reduce_perf'


def test_merge_takes_numbers_from_json_and_the_rest_from_text():
    text = _nccl.parse_text(fixture_text('real', 'h200x2', 'all_reduce_perf_g2.txt'))
    from_json = _nccl.parse_json(fixture_text('real', 'h200x2', 'all_reduce.json'))
    merged = _nccl.merge(from_json, text)
    assert merged['format'] == 'json'
    assert len(merged['ranks']) == 2  # the JSON lists rank 0 only
    assert merged['transport']['gdr'] is False
    assert merged['versions']['tests'] == '2.19.6'
    assert merged['results'] == from_json['results']


def test_parse_any_tells_json_from_text():
    assert _nccl.parse_any(fixture_text('real', 'h200x2', 'all_reduce.json'))['format'] == 'json'
    assert _nccl.parse_any(fixture_text('real', 'h200x2', 'all_gather_perf_g2.txt'))['format'] == 'text'


@pytest.mark.parametrize('parts, kind, message', [
    (('public', 'misc', 'gcm_mpirun_not_enough_slots.txt'), 'launch_failed',
     'There are not enough slots available in the system to satisfy the 16'),
    (('real', 'h200x2', 'all_reduce_bad_g3.txt'), 'invalid_usage', 'Invalid number of GPUs: 3 requested but only 2 were found.'),
])
def test_failures_of_captured_runs(parts, kind, message):
    parsed = _nccl.parse_text(fixture_text(*parts))
    status, failure = _nccl.outcome(parsed, 5)
    assert status == 'failed'
    assert failure['kind'] == kind
    assert failure['message'] == message


@pytest.mark.parametrize('text, kind', [
    ('--------------------------------------------------------------------------\n'
     'mpirun was unable to find the specified executable file, and therefore\n', 'missing_binary'),
    ('mpirun was unable to launch the specified application as it could not find an executable:\n', 'missing_binary'),
    ('ssh: connect to host n2 port 22: No route to host\n', 'launch_failed'),
    ('srun: error: n1: task 0: execve(): /opt/all_reduce_perf: No such file or directory\n', 'missing_binary'),
    ('n1: Test NCCL failure common.cu:1005 \'unhandled system error\'\n', 'nccl_init_failed'),
    ('n1:2:2 [0] NCCL WARN NET/IB : Got completion with error 12\n', 'nccl_init_failed'),
    ('n1: Cuda failure common.cu:891 \'out of memory\'\n', 'gpu_failed'),
])
def test_failure_lines(text, kind):
    assert _nccl.outcome(_nccl.parse_text(text), 1)[1]['kind'] == kind


def test_warning_in_a_complete_run_is_not_a_failure():
    text = 'n1:1:1 [0] NCCL WARN Could not find real path of /sys/class/net/eth0\n' + fixture_text('real', 'h200x2', 'all_gather_perf_g2.txt')
    assert _nccl.outcome(_nccl.parse_text(text), 0) == ('ok', None)


def test_truncated_table():
    lines = fixture_text('real', 'h200x2', 'all_gather_perf_g2.txt').splitlines(True)
    cut = ''.join(lines[:13])  # header and two rows, no Avg line
    parsed = _nccl.parse_text(cut)
    assert len(parsed['results']) == 2
    status, failure = _nccl.outcome(parsed, 0)
    assert (status, failure['kind']) == ('failed', 'truncated')
    assert 'after 2 result rows' in failure['message']


@pytest.mark.parametrize('text', ['', 'hello\nworld\n', '\x00\x01 garbage', '{"not": "results"}', '{broken json'])
def test_garbage_is_unparsed(text):
    status, failure = _nccl.outcome(_nccl.parse_any(text), 0)
    assert (status, failure['kind']) == ('failed', 'unparsed')


def test_wrong_results_are_data_corruption():
    text = fixture_text('real', 'h200x2', 'all_gather_perf_g2.txt').replace(
        '26.70       0    19.56', '26.70       3    19.56')
    parsed = _nccl.parse_text(text)
    assert parsed['wrong_total'] == 3
    assert _nccl.outcome(parsed, 0)[1]['kind'] == 'data_corruption'


def test_out_of_bounds_failed_is_data_corruption():
    text = fixture_text('real', 'h200x2', 'all_gather_perf_g2.txt').replace(
        'Out of bounds values : 0 OK', 'Out of bounds values : 4 FAILED')
    parsed = _nccl.parse_text(text)
    assert parsed['out_of_bounds'] == {'count': 4, 'ok': False}
    assert _nccl.outcome(parsed, 0)[1]['kind'] == 'data_corruption'


def test_nonzero_exit_after_a_complete_table():
    parsed = _nccl.parse_text(fixture_text('real', 'h200x2', 'all_gather_perf_g2.txt'))
    assert _nccl.outcome(parsed, 3)[1]['kind'] == 'exit_status'


@pytest.mark.parametrize('value, expected', [('8', 8), ('1K', 1024), ('64M', 64 << 20), ('1G', 1 << 30), ('1g', 1 << 30), ('x', None)])
def test_parse_size(value, expected):
    assert _nccl.parse_size(value) == expected


def test_bench_argv_in_flag_order():
    options = {'min_bytes': '8', 'max_bytes': '1G', 'step_factor': 2, 'gpus_per_process': 2, 'iterations': 20,
               'warmup_iters': 5, 'datatype': 'bfloat16', 'op': 'sum', 'check': 1, 'blocking': False, 'threads': 1,
               'test_timeout': 60, 'extra_args': ['-a', '3']}
    assert _nccl.bench_argv('/b/all_reduce_perf', options, '/tmp/x.json') == [
        '/b/all_reduce_perf', '-b', '8', '-e', '1G', '-f', '2', '-g', '2', '-t', '1', '-n', '20', '-w', '5',
        '-d', 'bfloat16', '-o', 'sum', '-c', '1', '-z', '0', '-T', '60', '-J', '/tmp/x.json', '-a', '3']


def test_mpirun_argv():
    cmd = _nccl.launch_argv('mpirun', ['/b/all_reduce_perf', '-g', '1'], {
        'hosts': ['10.7.96.17', '10.7.96.189'], 'slots_per_host': 8, 'oob_cidr': '10.0.0.0/8',
        'launcher_args': ['--allow-run-as-root'], 'mpirun_path': '/opt/ompi/bin/mpirun'}, ['MCCL_IB_HCA', 'NCCL_DEBUG'])
    assert cmd == ['/opt/ompi/bin/mpirun', '-np', '16', '--host', '10.7.96.17:8,10.7.96.189:8',
                   '--mca', 'btl_tcp_if_include', '10.0.0.0/8', '--mca', 'oob_tcp_if_include', '10.0.0.0/8',
                   '-x', 'MCCL_IB_HCA', '-x', 'NCCL_DEBUG', '--allow-run-as-root', '/b/all_reduce_perf', '-g', '1']


def test_srun_argv():
    cmd = _nccl.launch_argv('srun', ['/b/all_reduce_perf'], {'hosts': ['n1', 'n2'], 'slots_per_host': 4,
                                                             'srun_path': '/usr/bin/srun'})
    assert cmd == ['/usr/bin/srun', '-N', '2', '-n', '8', '--nodelist=n1,n2', '/b/all_reduce_perf']


def test_local_argv_is_the_benchmark_alone():
    assert _nccl.launch_argv('local', ['/b/all_reduce_perf', '-g', '2'], {'hosts': ['ignored']}) == ['/b/all_reduce_perf', '-g', '2']


def test_library_env():
    assert _nccl.library_env({'NCCL_IB_HCA': 'mlx5_0', 'NCCL_DEBUG': 'WARN', 'NCCL_P2P_DISABLE': True}, True) == {
        'NCCL_IB_HCA': 'mlx5_0', 'NCCL_DEBUG': 'WARN', 'NCCL_DEBUG_SUBSYS': 'INIT,NET,ENV', 'NCCL_P2P_DISABLE': '1'}
    assert _nccl.library_env({}, False) == {}


@pytest.mark.parametrize('help_text, expected', [
    ('  -J,--output_file <file>  Write [...] JSON', True),
    ('USAGE: all_reduce_perf [-t,--nthreads <num threads>] [-J,--output_file <file>]', True),
    ('  -T,--timeout <time in seconds>', False),
])
def test_help_has_json(help_text, expected):
    assert _nccl.help_has_json(help_text) is expected


@pytest.mark.parametrize('raw, lines', [
    ('[1,0]<stdout>:#  Rank  0 Pid 1 on n1 device  0 [0x00] A', ['#  Rank  0 Pid 1 on n1 device  0 [0x00] A']),
    ('[1,3]<stderr>:', ['']),
    # Two ranks writing at once: the second tag in the middle of the line starts a line of its own.
    ('[1,0]<stdout>:# Avg bus bandwidth    : 1.5 [1,1]<stdout>:n2:7:7 [1] NCCL INFO Using network IB',
     ['# Avg bus bandwidth    : 1.5 ', 'n2:7:7 [1] NCCL INFO Using network IB']),
    (' 0: # Out of bounds values : 0 OK', ['# Out of bounds values : 0 OK']),
    (' 0:', ['']),
    ('12: n1:5:5 [3] NCCL INFO Using network IB', ['n1:5:5 [3] NCCL INFO Using network IB']),
    ('[0] h1:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0', ['h1:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0']),
    # NCCL's own prefix is not a launcher's.
    ('node1:12345:12345 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB', ['node1:12345:12345 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB']),
    ('10-4-3-3:97095:97196 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer',
     ['10-4-3-3:97095:97196 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer']),
    ('          8             2     float     sum      -1', ['          8             2     float     sum      -1']),
])
def test_launcher_prefixes(raw, lines):
    assert [line for _number, line in _nccl.split_launcher_lines(raw)] == lines


def test_mid_line_tag_keeps_both_halves():
    parsed = _nccl.parse_text('[1,0]<stdout>:# Avg bus bandwidth    : 1.5 [1,1]<stdout>:n2:7:7 [1] NCCL INFO Using network IB\n')
    assert parsed['avg_busbw_gbs'] == 1.5
    assert parsed['transport']['net'] == 'IB'


@pytest.mark.parametrize('text, net, hcas, gdr', [
    # NCCL 2.4-2.5 form, name after a colon (https://github.com/NVIDIA/nccl issue 333 era logs).
    ('h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 : mlx5_0', None, ['mlx5_0'], False),
    ('h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 4 > 2)', None, [], False),
    ("h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'", None, ['mlx5_1'], True),
    ("h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB\nh:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_1'",
     'IB', ['mlx5_1:1'], True),
    ('h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0', 'Socket', [], None),
    ('h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n'
     'h:1:1 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1', 'Socket', [], None),
])
def test_gdr_and_hca_forms(text, net, hcas, gdr):
    transport = _nccl.parse_text(text)['transport']
    assert (transport['net'], transport['hcas'], transport['gdr']) == (net, hcas, gdr)


def test_nvls_channels_are_an_intra_node_transport():
    text = ('h:23:75 [3] NCCL INFO 24 coll channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer\n'
            'h:2:2 [0] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 2 p2p channels per peer\n')
    assert _nccl.parse_text(text)['transport']['intra'] == ['NVLS']
    assert _nccl.parse_text(text.splitlines()[1])['transport']['intra'] == []


@pytest.mark.parametrize('line, reason', [
    ('# Avg bus bandwidth    : ', 'the average line holds no finite number'),
    ('# Avg bus bandwidth    : nan', 'the average line holds no finite number'),
    ('# Avg bus bandwidth    : 1e999', 'the average line holds no finite number'),
    ('# Avg bus bandwidth    : ' + '9' * 400, 'the average line holds no finite number'),
])
def test_average_line_without_a_number(line, reason):
    parsed = _nccl.parse_text('#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n'
                              + line + '\n')
    assert parsed['avg_busbw_gbs'] is None
    text = line.strip() if len(line.strip()) <= _nccl.TEXT_MAX else line.strip()[:_nccl.TEXT_MAX] + '...'
    assert parsed['problems'] == [{'line': 2, 'text': text, 'reason': reason}]
    status, failure = _nccl.outcome(parsed)
    assert (status, failure['kind'], failure['line']['line']) == ('failed', 'truncated', 2)
    assert 'line 2 cannot be read (%s)' % reason in failure['message']


def test_row_cell_not_a_number_is_named():
    text = ('#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n'
            '8 2 float sum -1 inf 0.00 0.00 0 1.0 0.00 0.00 0\n' + 'x' * 500 + '\n')
    parsed = _nccl.parse_text(text)
    assert parsed['problems'][0]['reason'] == 'time or busbw is not a finite number'
    assert parsed['problems'][0]['line'] == 2


def test_long_lines_are_truncated_in_problems():
    line = '8 2 float sum -1 ' + '1.0 ' * 100
    problem = _nccl.parse_text(line)['problems'][0]
    assert len(problem['text']) == _nccl.TEXT_MAX + 3 and problem['text'].endswith('...')


@pytest.mark.parametrize('text', ['\x00' * 10, 'ab\x00cd\n# Avg bus bandwidth : \x00', '\x00{"results": []}', '[1,0]<stdout>:\x00',
                                  '9' * 5000, '# nThread 1 nGpus 99999999999999999999999999999999999 minBytes 8 maxBytes 8 step: 2(factor) '
                                  'warmup iters: 1 iters: 1 validation: 1'])
def test_hostile_text_never_raises(text):
    status, failure = _nccl.outcome(_nccl.parse_any(text))
    assert status == 'failed' and failure['kind'] in ('unparsed', 'truncated')


GOOD_ROW = {'size': 8, 'count': 2, 'type': 'float', 'redop': 'sum', 'root': -1,
            'out_of_place': {'time': 1.0, 'alg_bw': 0.0, 'bus_bw': 0.0, 'nwrong': 0},
            'in_place': {'time': 1.0, 'alg_bw': 0.0, 'bus_bw': 0.0, 'nwrong': 0}}


@pytest.mark.parametrize('doc, field, reason', [
    ({'results': ['x']}, 'results[0]', 'not an object'),
    ({'results': [dict(GOOD_ROW, size='8')]}, 'results[0]', "size is '8', not a non-negative integer"),
    ({'results': [dict(GOOD_ROW, size=1e999)]}, 'results[0]', 'size is inf, not a non-negative integer'),
    ({'results': [dict(GOOD_ROW, in_place=[1])]}, 'results[0]', 'in_place is [1], not an object'),
    ({'results': [dict(GOOD_ROW, out_of_place={'time': 'x', 'alg_bw': 0, 'bus_bw': 0})]}, 'results[0]',
     "out_of_place.time is 'x', not a finite number"),
    ({'results': [dict(GOOD_ROW, out_of_place={'time': 1, 'alg_bw': 0, 'bus_bw': None})]}, 'results[0]',
     'out_of_place.bus_bw is None, not a finite number'),
])
def test_json_wrong_types_are_named(doc, field, reason):
    import json
    parsed = _nccl.parse_json(json.dumps(doc))
    assert parsed['problems'][0] == {'line': None, 'text': field, 'reason': reason}
    status, failure = _nccl.outcome(parsed)
    assert (status, failure['kind']) == ('failed', 'truncated')
    assert '%s cannot be read (%s)' % (field, reason) in failure['message']


@pytest.mark.parametrize('text', [
    '{"results": [], "config": [], "args": 5, "nccl_version": true, "errors": "x", "out_of_bounds": []}',
    '{"results": [], "config": {"devices": [1, null], "nthreads": "1"}, "average_bus_bandwidth": {"bandwidth": 1e999}}',
    '{"results": [], "nccl_version": 1' + '0' * 400 + ', "out_of_bounds": {"count": "x"}}',
    '{"results": [], "average_bus_bandwidth": {"bandwidth": "fast"}}',
    '{"results": [' + '[' * 100000 + ']' * 100000 + ']}',
    '{"results": [], "size": ' + '9' * 5000 + '}',
    '{"results": [], "x": "\\u0000"}',
])
def test_json_hostile_documents_never_raise(text):
    parsed = _nccl.parse_any(text)
    status, failure = _nccl.outcome(parsed)
    assert status == 'failed' and failure['kind'] in ('unparsed', 'truncated')


def test_json_problem_fields():
    parsed = _nccl.parse_json('{"results": [], "config": {"devices": [1], "nthreads": "1"}, '
                              '"average_bus_bandwidth": {"bandwidth": 1e999}, "out_of_bounds": {"count": "x"}}')
    assert [problem['text'] for problem in parsed['problems']] == [
        'config.devices[0]', 'out_of_bounds.count', 'average_bus_bandwidth.bandwidth']
    assert parsed['header']['threads'] is None


@pytest.mark.parametrize('launcher', ['mpirun', 'srun'])
@pytest.mark.parametrize('host', ['a,b', '-oProxyCommand=sh', 'n1 n2', 'n1\0', ''])
def test_launch_argv_refuses_a_host_that_is_not_one(launcher, host):
    with pytest.raises(ValueError, match=r'^hosts: '):
        _nccl.launch_argv(launcher, ['all_reduce_perf'], {'hosts': ['ok-node', host], 'slots_per_host': 1})


@pytest.mark.parametrize('text', [
    '# nThread 1 nGpus %s minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0'
    % ('9' * 5000),
    '#  Rank  %s Group  0 Pid   1401 on vm device  0 [0000:00:06] NVIDIA H200' % ('1' * 5000),
    '# Out of bounds values : %s OK' % ('1' * 5000),
])
def test_numbers_past_the_int_digit_limit_are_problems_not_tracebacks(text):
    status, failure = _nccl.outcome(_nccl.parse_text(text))
    assert status == 'failed' and failure['kind'] in ('truncated', 'unparsed')


def test_json_integers_past_a_float_are_problems():
    doc = json.loads(fixture_text('real', 'h200x2', 'all_reduce.json'))
    doc['results'][0]['out_of_place']['time'] = 10 ** 400
    doc['average_bus_bandwidth']['bandwidth'] = -(10 ** 400)
    parsed = _nccl.parse_json(json.dumps(doc))
    assert parsed['problems'][0]['text'] == 'results[0]' and 'time' in parsed['problems'][0]['reason']
    assert parsed['avg_busbw_gbs'] is None
