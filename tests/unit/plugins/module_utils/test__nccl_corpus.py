# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""_nccl over the whole corpus of real outputs: every nccl-tests / rccl-tests / mccl output and
every NCCL INFO log kept under tests/fixtures (public sources named in each file's '## source'
line, see tests/fixtures/public/INDEX.md), each with the values read by hand from the file."""

from __future__ import annotations

import glob
import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _nccl
from tests.unit.conftest import FIXTURES, fixture_text

T = ('public', 'nccl_tests')
I = ('public', 'nccl_info')
NO_NET = (None, None, [], [])

# (parts, rows, last row (size, out-of-place busbw, in-place busbw), avg busbw, #wrong total, ranks,
#  status, failure kind, transport (net, gdr, hcas, intra), line number of the first unreadable line)
CORPUS = [
    # --- public/nccl_tests: complete tables
    (T + ('a3mega_h100_allreduce_2node_16rank.txt',), 31, (8589934592, 338.82, 337.35), 70.742, 0, 16, 'ok', None, NO_NET, None),
    (T + ('aks_allreduce_ipoib_no_rdma_slow.txt',), 16, (8589934592, 3.15, 3.09), 1.38997, None, 0, 'ok', None, NO_NET, None),
    (T + ('aks_allreduce_sriov_ib_na_wrong.txt',), 16, (8589934592, 187.22, 187.05), 56.3994, None, 0, 'ok', None, NO_NET, None),
    (T + ('deepops_dgx_a100_2node_k8s_error_col.txt',), 30, (4294967296, 188.53, 188.7), 53.7098, None, 0, 'ok', None, NO_NET, None),
    (T + ('deepops_dgx_a100_4node_slurm_error_col.txt',), 13, (4294967296, 191.05, 191.56), 113.289, None, 0, 'ok', None, NO_NET,
     None),
    (T + ('deepops_roce_sriov_k8s_allreduce_error_col.txt',), 29, (2147483648, 22.92, 22.85), 7.76739, None, 0, 'ok', None, NO_NET,
     None),
    (T + ('gcm_a100_allreduce_1node_8gpu.txt',), 6, (1073741824, 231.72, 231.7), 210.99, 0, 8, 'ok', None, NO_NET, None),
    (T + ('gcm_a100_allreduce_2node_16gpu.txt',), 6, (1073741824, 182.8, 181.39), 150.209, 0, 16, 'ok', None, NO_NET, None),
    (T + ('rocm_sad_rccl_allreduce_mi350x_8gpu.txt',), 31, (8589934592, 360.97, 367.51), 111.827, 0, 8, 'ok', None, NO_NET, None),
    # launcher prefixes
    (T + ('awsefa_eks_p4d_2node_tag_output_error_col.txt',), 30, (4294967296, 43.81, 43.72), 11.2432, None, 16, 'ok', None,
     ('AWS Libfabric', True, [], ['P2P']), None),
    (T + ('ncclebpf_rtx5090_tag_output_stderr_socket.txt',), 8, (134217728, 2.3, 2.31), 1.57614, 0, 2, 'ok', None, NO_NET, None),
    (T + ('aws_k8s_tester_503_p5_tag_output_padded.txt',), 3, (32, 0.0, 0.0), None, 0, 0, 'failed', 'truncated', NO_NET, None),
    (T + ('nccl_tests_290_h100_srun_label_2node_na.txt',), 11, (8589934592, 155.57, 155.56), 142.735, None, 16, 'ok', None, NO_NET,
     None),
    (T + ('nccl_tests_290_h100_srun_label_ring_no_header.txt',), 11, (8589934592, 89.9, 89.4), 85.5294, None, 16, 'ok', None,
     NO_NET, None),
    (T + ('rccl_1490_mi250x_srun_label_all_gather.txt',), 17, (4294967296, 92.66, 92.74), 37.9868, 0, 0, 'ok', None, NO_NET, None),
    (T + ('rccl_1490_mi250x_srun_label_all_reduce.txt',), 17, (4294967296, 92.89, 92.88), 43.7269, 0, 0, 'ok', None, NO_NET, None),
    # excerpts: tails, no header, inferred columns
    (T + ('rccl_2078_ainic_tail_only.txt',), 4, (17179869184, 360.98, 361.17), 142.652, 0, 0, 'ok', None, NO_NET, None),
    (T + ('nccl_tests_119_tail_footer_only.txt',), 6, (133169160, 95.74, 95.94), 84.8558, 0, 0, 'ok', None, NO_NET, None),
    (T + ('coreweave_43_gb200_nvl72_excerpt.txt',), 5, (8589934592, 834.57, 846.82), 745.53, 0, 1, 'ok', None, NO_NET, None),
    (T + ('nccl_340_old_units_line_0e00_error.txt',), 11, (8192, 0.25, 0.24), None, None, 0, 'failed', 'truncated', NO_NET, None),
    (T + ('nccl_tests_182_interleaved_two_runs.txt',), 10, (1024, 0.02, 0.02), None, 0, 0, 'failed', 'truncated', NO_NET, None),
    (T + ('nccl_1435_all_gather_bf16_linear_step.txt',), 7, (117440512, 119.64, 140.24), None, 0, 0, 'failed', 'truncated', NO_NET,
     None),
    # old formats
    (T + ('nccl_tests_82_broadcast_old_root_no_redop.txt',), 1, (8, 0.0, 0.0), None, None, 2, 'failed', 'truncated', NO_NET, None),
    (T + ('nccl_tests_176_old_error_col_128gpu_truncated.txt',), 6, (131072, 2.15, 2.22), None, None, 0, 'failed', 'truncated',
     NO_NET, None),
    (T + ('nccl_583_old_no_hash_header_a100.txt',), 0, None, None, None, 8, 'failed', 'truncated', NO_NET, None),
    (T + ('nccl_tests_249_no_hash_header_a10g.txt',), 0, None, None, None, 1, 'failed', 'truncated', NO_NET, 11),
    (T + ('nccl_1530_rtx4090_cut_row.txt',), 0, None, None, None, 8, 'failed', 'truncated', NO_NET, 17),
    (T + ('rocm_ctk_77_rccl_enroot_version_line.txt',), 0, None, None, None, 7, 'failed', 'truncated', NO_NET, None),
    (T + ('nccl_tests_24_ib_completion_error.txt',), 0, None, None, None, 0, 'failed', 'nccl_init_failed', NO_NET, None),
    # --- public/nccl_info: NCCL_DEBUG=INFO logs without a result table
    (I + ('nccl_1453_h100_bracket_prefix_ibext_gdrdma.txt',), 0, None, None, None, 0, 'failed', 'unparsed', ('IB', True, [], []),
     None),
    (I + ('nccl_1453_h100_p2p_cumem_and_pxn_gdrdma.txt',), 0, None, None, None, 0, 'failed', 'unparsed',
     ('IB', True, [], ['P2P']), None),
    (I + ('nccl_1773_p2p_direct_pointer_only.txt',), 0, None, None, None, 0, 'failed', 'unparsed', (None, None, [], ['P2P']), None),
    (I + ('nccl_644_direct_shared_memory_old_channel.txt',), 0, None, None, None, 0, 'failed', 'unparsed',
     (None, None, [], ['SHM', 'P2P']), None),
    (I + ('nccl_1817_shm_direct_and_p2p.txt',), 0, None, None, None, 0, 'failed', 'unparsed', (None, None, [], ['SHM', 'P2P']), None),
    (I + ('nccl_tests_29_ring_p2p_ipc_old.txt',), 0, None, None, None, 0, 'failed', 'unparsed', (None, None, [], ['P2P']), None),
    (I + ('nccl_1053_socket_lo_gdr_disabled.txt',), 0, None, None, None, 0, 'failed', 'unparsed', ('Socket', False, [], []), None),
    (I + ('nccl_398_efa_no_ib_socket_fallback.txt',), 0, None, None, None, 0, 'failed', 'nccl_init_failed', ('Socket', None, [], []),
     None),
    (I + ('nccl_1537_roce_gdr_disabled_two_hcas.txt',), 0, None, None, None, 0, 'failed', 'unparsed',
     ('IB', False, ['mlx5_0:1', 'mlx5_1:1'], []), None),
    (I + ('nccl_tests_293_dmabuf_gdrdma_two_nodes.txt',), 2, (1073741824, 6.44, 6.43), 2.36313, 0, 2, 'ok', None,
     ('IB', True, ['mlx5_0:1'], []), None),
    (I + ('nccl_988_ibext_sharp_8hca.txt',), 0, None, None, None, 0, 'failed', 'unparsed',
     ('IB', None, ['mlx5_%d:1' % index for index in range(8)], []), None),
    (I + ('nccl_tests_29_socket_and_ib_using_multi_host.txt',), 0, None, None, None, 0, 'failed', 'unparsed',
     ('IB', None, ['mlx5_0:1', 'mlx5_1:1'], []), None),
    (I + ('nccl_mesh_plugin_56_ib_no_gdr_empty_host.txt',), 0, None, None, None, 0, 'failed', 'unparsed', ('IB', False, [], []), None),
    (I + ('nccl_527_aws_libfabric_gdrdma_no_prefix.txt',), 0, None, None, None, 0, 'failed', 'unparsed',
     ('AWS Libfabric', True, [], ['P2P']), None),
    # --- captured runs: MetaX mccl tests, and this project's H200 VM
    (('seeds', '000_mccl_allreduce_1node_8gpu.txt'), 21, (1073741824, 65.08, 65.06), 29.7818, 0, 8, 'ok', None, NO_NET, None),
    (('seeds', '000_mccl_allreduce_2node_16gpu_fixed.txt'), 21, (1073741824, 73.24, 73.05), 24.3851, 0, 16, 'ok', None, NO_NET, None),
    (('seeds', '000_mccl_allreduce_2node_16gpu_no_gdr.txt'), 21, (1073741824, 7.96, 7.76), 4.57073, 0, 16, 'ok', None, NO_NET, None),
    (('seeds', '000_mccl_allreduce_2node_1gpu.txt'), 21, (1073741824, 12.5, 12.38), 6.97858, 0, 2, 'ok', None, NO_NET, None),
    (('real', 'h200x2', 'all_gather_perf_g2.txt'), 5, (268435456, 245.88, 254.91), 145.668, 0, 2, 'ok', None, NO_NET, None),
    (('real', 'h200x2', 'all_reduce_perf_g2.txt'), 28, (1073741824, 327.22, 326.81), 87.6407, 0, 2, 'ok', None,
     ('Socket', False, [], ['P2P']), None),
    (('real', 'h200x2', 'all_reduce.json'), 28, (1073741824, 327.22, 326.81), 87.6407, 0, 1, 'ok', None, NO_NET, None),
    (('real', 'h200x2', 'all_reduce_bad_g3.txt'), 0, None, None, None, 0, 'failed', 'invalid_usage', NO_NET, None),
    # One 4 x H200 host split in two (real/h200x4-split/README.md): P2P, NET/Socket and SHM between two GPUs of one node.
    (('real', 'h200x4-split', 'nodeA.txt'), 6, (1073741824, 325.92, 328.62), 215.69, 0, 2, 'ok', None, ('Socket', False, [], ['P2P']),
     None),
    (('real', 'h200x4-split', 'nodeB.txt'), 6, (1073741824, 3.21, 3.64), 3.26209, 0, 2, 'ok', None, ('Socket', False, [], []), None),
    (('real', 'h200x4-split', 'nodeB_shm.txt'), 6, (1073741824, 27.83, 27.68), 24.9172, 0, 2, 'ok', None,
     ('Socket', False, [], ['SHM']), None),
]

# The kinds of fixture the corpus covers: every file of these directories, and these name patterns elsewhere.
CORPUS_GLOBS = ('public/nccl_tests/*', 'public/nccl_info/*', 'seeds/000_mccl_*', 'real/h200x2/all_*', 'real/h200x4-split/node*')


@pytest.mark.parametrize('parts, rows, last, avg, wrong_total, ranks, status, kind, transport, problem_line', CORPUS,
                         ids=[case[0][-1] for case in CORPUS])
def test_corpus(parts, rows, last, avg, wrong_total, ranks, status, kind, transport, problem_line):
    parsed = _nccl.parse_any(fixture_text(*parts))
    assert len(parsed['results']) == rows
    if last is not None:
        row = parsed['results'][-1]
        assert (row['size_bytes'], row['out_of_place']['busbw_gbs'], row['in_place']['busbw_gbs']) == last
    assert parsed['avg_busbw_gbs'] == avg
    assert parsed['wrong_total'] == wrong_total
    assert len(parsed['ranks']) == ranks
    got, failure = _nccl.outcome(parsed)
    assert (got, (failure or {}).get('kind')) == (status, kind)
    net, gdr, hcas, intra = transport
    assert (parsed['transport']['net'], parsed['transport']['gdr'], parsed['transport']['hcas'],
            sorted(parsed['transport']['intra'])) == (net, gdr, hcas, sorted(intra))
    first = parsed['problems'][0]['line'] if parsed['problems'] else None
    assert first == problem_line
    if problem_line is not None:
        assert failure['line']['line'] == problem_line
        assert 'line %d cannot be read' % problem_line in failure['message']


def test_every_corpus_file_is_in_the_table():
    on_disk = set()
    for pattern in CORPUS_GLOBS:
        on_disk.update(os.path.relpath(path, FIXTURES) for path in glob.glob(os.path.join(FIXTURES, pattern)))
    in_table = set(os.path.join(*case[0]) for case in CORPUS)
    assert on_disk - in_table == set()
    assert in_table - on_disk == set()
    assert len(glob.glob(os.path.join(FIXTURES, 'public', 'nccl_info', '*'))) >= 10


@pytest.mark.parametrize('pattern', ['public/nccl_tests/*', 'public/nccl_info/*'])
def test_public_files_name_their_source(pattern):
    for path in glob.glob(os.path.join(FIXTURES, pattern)):
        with open(path) as handle:
            head = [handle.readline(), handle.readline()]
        assert head[0].startswith('## source: ') and head[1].startswith('## note: '), path


# Details the table above does not show, each read by hand from its file.
def test_tag_output_keeps_every_device_and_the_library_version():
    parsed = _nccl.parse_text(fixture_text(*T + ('awsefa_eks_p4d_2node_tag_output_error_col.txt',)))
    assert parsed['hosts'] == ['nccl-tests-efa-16-worker-0', 'nccl-tests-efa-16-worker-1']
    assert parsed['versions']['library_version'] == '2.9.9+cuda11.2'
    assert parsed['columns'] == {'root': False, 'redop': True, 'check': 'error', 'source': 'header'}
    assert parsed['results'][0]['out_of_place'] == {'time_us': 179.1, 'algbw_gbs': 0.0, 'busbw_gbs': 0.0, 'wrong': None,
                                                    'error': 2e-07}
    assert 'nccl-tests-efa-16-worker-0:25:25 [0] NCCL INFO Using network AWS Libfabric' in parsed['transport']['evidence']


def test_stderr_tags_and_the_tests_version():
    parsed = _nccl.parse_text(fixture_text(*T + ('ncclebpf_rtx5090_tag_output_stderr_socket.txt',)))
    assert parsed['benchmark'] == 'all_reduce_perf_mpi'
    assert parsed['versions']['tests'] == '2.18.0'
    assert parsed['header']['min_bytes'] == 1048576


def test_old_broadcast_has_root_but_no_redop():
    parsed = _nccl.parse_text(fixture_text(*T + ('nccl_tests_82_broadcast_old_root_no_redop.txt',)))
    assert parsed['columns'] == {'root': True, 'redop': False, 'check': 'error', 'source': 'header'}
    row = parsed['results'][0]
    assert (row['type'], row['redop'], row['root'], row['out_of_place']['time_us'], row['in_place']['time_us']) == (
        'float', None, 0, 45.82, 38.17)
    assert parsed['versions']['library_version'] == '2.9.6+cuda11.2'
    # The WARN lines came before a result row: the run went on, so the excerpt is only cut off.
    assert parsed['failure'] is None


def test_header_without_hash_is_read():
    old = _nccl.parse_text(fixture_text(*T + ('nccl_583_old_no_hash_header_a100.txt',)))
    assert (old['header']['gpus'], old['header']['max_bytes'], old['header']['iters']) == (1, 8589934592, 20)
    assert old['columns'] == {'root': False, 'redop': True, 'check': 'error', 'source': 'header'}
    assert old['hosts'] == ['AI-A100-Beethoven01']
    new = _nccl.parse_text(fixture_text(*T + ('nccl_tests_249_no_hash_header_a10g.txt',)))
    assert new['header']['agg_iters'] == 1 and new['columns']['root'] is True


def test_inferred_columns_of_headerless_rows():
    old = _nccl.parse_text(fixture_text(*T + ('nccl_340_old_units_line_0e00_error.txt',)))
    assert old['columns'] == {'root': False, 'redop': True, 'check': 'error', 'source': 'inferred'}
    assert old['results'][0]['out_of_place']['error'] == 0.0
    tail = _nccl.parse_text(fixture_text(*T + ('rccl_2078_ainic_tail_only.txt',)))
    assert tail['columns'] == {'root': True, 'redop': True, 'check': 'wrong', 'source': 'inferred'}
    assert tail['results'][0]['root'] == -1


def test_interleaved_rows_are_kept_in_order():
    parsed = _nccl.parse_text(fixture_text(*T + ('nccl_tests_182_interleaved_two_runs.txt',)))
    assert [row['size_bytes'] for row in parsed['results']] == [8, 16, 32, 64, 128, 256, 8, 512, 16, 1024]


def test_rccl_version_between_header_lines():
    parsed = _nccl.parse_text(fixture_text(*T + ('rocm_ctk_77_rccl_enroot_version_line.txt',)))
    assert (parsed['versions']['tool'], parsed['versions']['tests']) == ('rccl-tests', 'develop:5272cd1')
    assert parsed['header']['gpus'] == 8


def test_cut_row_is_named_with_its_reason():
    parsed = _nccl.parse_text(fixture_text(*T + ('nccl_1530_rtx4090_cut_row.txt',)))
    assert parsed['problems'] == [{'line': 17, 'text': '8             2     float     sum      -1    42.56    0.00    0.00      0',
                                   'reason': 'a result row has 9 fields, the table has 13 columns'}]


def test_completion_error_names_the_warn_line():
    failure = _nccl.outcome(_nccl.parse_text(fixture_text(*T + ('nccl_tests_24_ib_completion_error.txt',))))[1]
    assert failure['message'] == ('gpu5:6252:6325 [0] transport/net_ib.cu:788 NCCL WARN NET/IB : Got completion with error 4, '
                                  'opcode 1, len 0, vendor err 81')


def test_transport_names_as_printed():
    ibext = _nccl.parse_text(fixture_text(*I + ('nccl_1453_h100_bracket_prefix_ibext_gdrdma.txt',)))['transport']
    assert ibext['net_name'] == 'IBext_v8'
    assert ibext['evidence'][0] == ('h100clust-worker-1:497888:498098 [0] NCCL INFO Channel 07/0 : 0[0] -> 8[0] [send] '
                                    'via NET/IBext_v8/7/GDRDMA')
    sharp = _nccl.parse_text(fixture_text(*I + ('nccl_988_ibext_sharp_8hca.txt',)))['transport']
    assert sharp['net_name'] == 'IBext'
    socket = _nccl.parse_text(fixture_text(*I + ('nccl_1053_socket_lo_gdr_disabled.txt',)))['transport']
    assert "axa:3048391:3048566 [0] NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'lo'" in socket['evidence']
