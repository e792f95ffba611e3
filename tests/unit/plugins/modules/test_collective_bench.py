# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""collective_bench: from_log, argument validation, check mode, the exact command lines of
each launcher (processes recorded, then replaced by ones that print a fixture), the
environment passed, and the timeout that kills the whole process group."""

from __future__ import annotations

import os
import sys

import pytest

from ansible.module_utils import basic

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process
from ansible_collections.hpc.gpu_fabric.plugins.modules import collective_bench
from tests.unit.conftest import fixture_path, fixture_text
from tests.unit.plugins.modules.utils import run_module

REAL_POPEN = _process.subprocess.Popen
PRINTER = 'import sys; sys.stdout.write(sys.argv[1]); sys.stderr.write(sys.argv[2]); sys.exit(int(sys.argv[3]))'
REAL_TEXT = fixture_text('real', 'h200x2', 'all_reduce_perf_g2.txt')


class Processes(object):
    """Stands in for subprocess.Popen: records argv and env, runs a printer of canned output."""

    def __init__(self, stdout, stderr='', rc=0, json_text=None, program=None):
        self.output = (stdout, stderr, rc)
        self.json_text = json_text
        self.program = program
        self.calls = []
        self.envs = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        self.envs.append(kwargs.get('env'))
        if self.json_text is not None and '-J' in argv:
            with open(argv[argv.index('-J') + 1], 'w') as handle:
                handle.write(self.json_text)
        if self.program:
            return REAL_POPEN([sys.executable, '-c', self.program], **kwargs)
        stdout, stderr, rc = self.output
        return REAL_POPEN([sys.executable, '-c', PRINTER, stdout, stderr, str(rc)], **kwargs)


@pytest.fixture
def tools(monkeypatch):
    """Binaries 'installed' in /usr/bin, -h without -J unless json_help; returns an installer of Processes."""
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, required=False, opt_dirs=None: '/usr/bin/' + name)
    helps = []

    def install(*args, **kwargs):
        help_text = kwargs.pop('help_text', 'USAGE: all_reduce_perf [-t,--nthreads <num threads>]')
        monkeypatch.setattr(basic.AnsibleModule, 'run_command',
                            lambda self, argv, **kw: helps.append(argv) or (0, help_text, ''))
        processes = Processes(*args, **kwargs)
        processes.helps = helps
        monkeypatch.setattr(_process.subprocess, 'Popen', processes)
        return processes

    return install


@pytest.mark.parametrize('parts, status, avg, kind', [
    (('real', 'h200x2', 'all_reduce_perf_g2.txt'), 'ok', 87.6407, None),
    (('real', 'h200x2', 'all_reduce.json'), 'ok', 87.6407, None),
    (('real', 'h200x2', 'all_reduce_bad_g3.txt'), 'failed', None, 'invalid_usage'),
    (('public', 'misc', 'gcm_mpirun_not_enough_slots.txt'), 'failed', None, 'launch_failed'),
    (('seeds', '000_mccl_allreduce_2node_16gpu_no_gdr.txt'), 'ok', 4.57073, None),
    (('public', 'nccl_tests', 'awsefa_eks_p4d_2node_tag_output_error_col.txt'), 'ok', 11.2432, None),
    (('public', 'nccl_tests', 'nccl_tests_290_h100_srun_label_2node_na.txt'), 'ok', 142.735, None),
    (('public', 'nccl_tests', 'rccl_2078_ainic_tail_only.txt'), 'ok', 142.652, None),
    (('public', 'nccl_tests', 'nccl_1530_rtx4090_cut_row.txt'), 'failed', None, 'truncated'),
    (('public', 'nccl_info', 'nccl_1537_roce_gdr_disabled_two_hcas.txt'), 'failed', None, 'unparsed'),
])
def test_from_log(monkeypatch, parts, status, avg, kind):
    result, failed = run_module(collective_bench.main, {'from_log': fixture_path(*parts)}, monkeypatch)
    assert failed is False
    assert result['status'] == status
    assert result['avg_busbw_gbs'] == avg
    assert (result['failure'] or {}).get('kind') == kind
    assert isinstance(result['problems'], list)
    assert result['changed'] is False


def test_from_log_returns_the_unreadable_line_and_the_transport(monkeypatch):
    cut, failed = run_module(collective_bench.main, {'from_log': fixture_path('public', 'nccl_tests', 'nccl_1530_rtx4090_cut_row.txt')},
                             monkeypatch)
    assert failed is False
    # Numbered as in the file, whose two '## ' header lines come first.
    assert cut['problems'][0]['line'] == 19
    assert cut['failure']['line'] == cut['problems'][0]
    assert 'line 19 cannot be read (a result row has 9 fields, the table has 13 columns)' in cut['failure']['message']
    efa, failed = run_module(collective_bench.main, {'from_log': fixture_path('public', 'nccl_tests',
                                                                              'awsefa_eks_p4d_2node_tag_output_error_col.txt')}, monkeypatch)
    assert (efa['transport']['net'], efa['transport']['gdr'], efa['transport']['intra']) == ('AWS Libfabric', True, ['P2P'])
    assert len(efa['ranks']) == 16 and len(efa['results']) == 30


def test_from_log_of_hostile_bytes(monkeypatch, tmp_path):
    path = tmp_path / 'garbage.log'
    path.write_bytes(b'\x00\xff\xfe[1,0]<stdout>:# Avg bus bandwidth : \x00\n' + b'9' * 5000)
    result, failed = run_module(collective_bench.main, {'from_log': str(path)}, monkeypatch)
    assert failed is False
    assert (result['status'], result['failure']['kind']) == ('failed', 'unparsed')
    assert result['problems'][0]['line'] == 1
    assert result['changed'] is False


def test_from_log_text_and_json_agree(monkeypatch):
    text, _failed = run_module(collective_bench.main, {'from_log': fixture_path('real', 'h200x2', 'all_reduce_perf_g2.txt')}, monkeypatch)
    data, _failed = run_module(collective_bench.main, {'from_log': fixture_path('real', 'h200x2', 'all_reduce.json')}, monkeypatch)
    assert (text['format'], data['format']) == ('text', 'json')
    assert text['results'] == data['results']
    assert text['msg'] == 'all_reduce_perf: avg bus bandwidth 87.6407 GB/s, max 327.22 GB/s over 28 sizes'


@pytest.mark.parametrize('content, kind', [
    (b'\x00\xffnot a benchmark\n', 'unparsed'),
    (''.join(REAL_TEXT.splitlines(True)[:-8]).encode(), 'truncated'),
])
def test_from_log_garbage_and_truncated(monkeypatch, tmp_path, content, kind):
    log = tmp_path / 'out.txt'
    log.write_bytes(content)
    result, failed = run_module(collective_bench.main, {'from_log': str(log)}, monkeypatch)
    assert failed is False
    assert (result['status'], result['failure']['kind']) == ('failed', kind)
    result, failed = run_module(collective_bench.main, {'from_log': str(log), 'fail_on_error': True}, monkeypatch)
    assert failed is True


def test_from_log_missing_file_fails_the_task(monkeypatch, tmp_path):
    result, failed = run_module(collective_bench.main, {'from_log': str(tmp_path / 'none.txt')}, monkeypatch)
    assert failed is True
    assert 'cannot read from_log' in result['msg']


@pytest.mark.parametrize('args, message', [
    ({'min_bytes': 'lots'}, 'min_bytes must be a size'),
    ({'iterations': 0}, 'iterations must be a positive integer'),
    ({'launcher': 'mpirun'}, 'launcher=mpirun needs hosts'),
    ({'hosts': ['n1']}, 'hosts applies to launcher mpirun or srun'),
    ({'env': {'A=B': '1'}}, 'is not an environment variable name'),
])
def test_bad_arguments_fail_the_task(monkeypatch, tools, args, message):
    tools(REAL_TEXT)
    result, failed = run_module(collective_bench.main, args, monkeypatch)
    assert failed is True
    assert message in result['msg']


def test_local_run_argv_env_and_result(monkeypatch, tools):
    processes = tools(REAL_TEXT)
    result, failed = run_module(collective_bench.main, {
        'min_bytes': '8', 'max_bytes': '1G', 'step_factor': 2, 'gpus_per_process': 2, 'iterations': 20, 'warmup_iters': 1,
        'datatype': 'float', 'op': 'sum', 'check': 1, 'blocking': False, 'threads': 1, 'test_timeout': 60,
        'env': {'NCCL_NVLS_ENABLE': 0}}, monkeypatch)
    assert failed is False
    assert processes.calls == [['/usr/bin/all_reduce_perf', '-b', '8', '-e', '1G', '-f', '2', '-g', '2', '-t', '1', '-n', '20',
                                '-w', '1', '-d', 'float', '-o', 'sum', '-c', '1', '-z', '0', '-T', '60']]
    assert processes.helps == [['/usr/bin/all_reduce_perf', '-h']]
    env = processes.envs[0]
    assert (env['NCCL_DEBUG'], env['NCCL_DEBUG_SUBSYS'], env['NCCL_NVLS_ENABLE'], env['LC_ALL']) == ('INFO', 'INIT,NET,ENV,GRAPH', '0', 'C')
    assert result['status'] == 'ok'
    assert result['avg_busbw_gbs'] == 87.6407
    assert result['transport']['gdr'] is False
    assert result['rc'] == 0
    assert result['cmd'] == processes.calls[0]


def test_local_run_with_json(monkeypatch, tools):
    processes = tools(REAL_TEXT, json_text=fixture_text('real', 'h200x2', 'all_reduce.json'),
                      help_text='  -J,--output_file <file>  JSON output')
    result, failed = run_module(collective_bench.main, {'gpus_per_process': 2, 'debug': False}, monkeypatch)
    assert failed is False
    argv = processes.calls[0]
    assert argv[:4] == ['/usr/bin/all_reduce_perf', '-g', '2', '-J']
    assert argv[4].endswith('/all_reduce_perf.json')
    assert not os.path.exists(os.path.dirname(argv[4]))  # the temporary directory is gone
    assert 'NCCL_DEBUG' not in processes.envs[0] or processes.envs[0]['NCCL_DEBUG'] == os.environ.get('NCCL_DEBUG')
    assert result['format'] == 'json'
    assert result['versions']['tests'] == '2.19.6'  # from the text beside the JSON
    assert len(result['ranks']) == 2


def test_mpirun_argv(monkeypatch, tools):
    processes = tools(fixture_text('seeds', '000_mccl_allreduce_2node_16gpu_fixed.txt'))
    result, failed = run_module(collective_bench.main, {
        'launcher': 'mpirun', 'hosts': ['10.7.96.17', '10.7.96.189'], 'slots_per_host': 8, 'oob_cidr': '10.0.0.0/8',
        'binary': sys.executable, 'min_bytes': '1K', 'max_bytes': '1G', 'datatype': 'float', 'step_factor': 2,
        'gpus_per_process': 1, 'iterations': 10, 'launcher_args': ['--allow-run-as-root'],
        'env': {'MCCL_IB_HCA': 'mlx5_0', 'MCCL_CROSS_NIC': 1}}, monkeypatch)
    assert failed is False
    assert processes.calls == [[
        '/usr/bin/mpirun', '-np', '16', '--host', '10.7.96.17:8,10.7.96.189:8',
        '--mca', 'btl_tcp_if_include', '10.0.0.0/8', '--mca', 'oob_tcp_if_include', '10.0.0.0/8',
        '-x', 'MCCL_CROSS_NIC', '-x', 'MCCL_IB_HCA', '-x', 'NCCL_DEBUG', '-x', 'NCCL_DEBUG_SUBSYS', '--allow-run-as-root',
        sys.executable, '-b', '1K', '-e', '1G', '-f', '2', '-g', '1', '-n', '10', '-d', 'float']]
    assert processes.helps == []  # auto with a launcher: no -J, no -h
    assert processes.envs[0]['MCCL_CROSS_NIC'] == '1'
    assert result['avg_busbw_gbs'] == 24.3851
    assert result['hosts'] == ['mx-sh-demo', 'mx-sh-demo-02']


def test_srun_argv(monkeypatch, tools):
    processes = tools(REAL_TEXT)
    run_module(collective_bench.main, {'launcher': 'srun', 'hosts': ['n1', 'n2'], 'slots_per_host': 8,
                                       'benchmark': 'all_gather_perf', 'debug': False, 'output_format': 'text'}, monkeypatch)
    assert processes.calls == [['/usr/bin/srun', '-N', '2', '-n', '16', '--nodelist=n1,n2', '/usr/bin/all_gather_perf']]


def test_mpirun_slots_failure_is_a_result(monkeypatch, tools):
    tools('', fixture_text('public', 'misc', 'gcm_mpirun_not_enough_slots.txt'), 1)
    result, failed = run_module(collective_bench.main, {'launcher': 'mpirun', 'processes': 16}, monkeypatch)
    assert failed is False
    assert result['status'] == 'failed'
    assert result['failure']['kind'] == 'launch_failed'
    assert result['rc'] == 1


def test_real_bad_run_rc5(monkeypatch, tools):
    tools(fixture_text('real', 'h200x2', 'all_reduce_bad_g3.txt'), '', 5)
    result, failed = run_module(collective_bench.main, {'gpus_per_process': 3, 'fail_on_error': True}, monkeypatch)
    assert failed is True
    assert result['failure']['kind'] == 'invalid_usage'
    assert result['rc'] == 5
    assert result['msg'] == 'all_reduce_perf failed (invalid_usage): Invalid number of GPUs: 3 requested but only 2 were found.'


def test_missing_binary_is_a_failed_result(monkeypatch, tools):
    processes = tools(REAL_TEXT)
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, required=False, opt_dirs=None: None)
    result, failed = run_module(collective_bench.main, {}, monkeypatch)
    assert failed is False
    assert result['failure']['kind'] == 'missing_binary'
    assert processes.calls == []


def test_check_mode_runs_nothing(monkeypatch, tools):
    processes = tools(REAL_TEXT)
    result, failed = run_module(collective_bench.main, {'_ansible_check_mode': True, 'gpus_per_process': 2}, monkeypatch)
    assert failed is False
    assert result['status'] == 'skipped'
    assert result['cmd'] == ['/usr/bin/all_reduce_perf', '-g', '2']
    assert processes.calls == []


@pytest.mark.parametrize('option', ['root_rank', 'root'])
def test_root_rank_and_its_alias_root_give_r(monkeypatch, tools, option):
    tools(REAL_TEXT)
    result, failed = run_module(collective_bench.main, {'_ansible_check_mode': True, 'benchmark': 'broadcast_perf', option: 1},
                                monkeypatch)
    assert failed is False
    assert result['cmd'] == ['/usr/bin/broadcast_perf', '-r', '1']


def test_timeout_kills_the_process_group(monkeypatch, tools, tmp_path):
    pidfile = tmp_path / 'child.pid'
    # The benchmark forks a child that would outlive it; both must be gone after the timeout.
    program = ('import os, subprocess, sys, time\n'
               'child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])\n'
               'open(%r, "w").write(str(child.pid))\n'
               'print("# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 1 iters: 1 validation: 1 graph: 0")\n'
               'sys.stdout.flush(); time.sleep(60)\n' % str(pidfile))
    tools('', program=program)
    result, failed = run_module(collective_bench.main, {'timeout': 2}, monkeypatch)
    assert failed is False
    assert result['failure']['kind'] == 'timeout'
    assert result['elapsed_s'] < 10
    assert child_state(int(pidfile.read_text())) in (None, 'Z')


def child_state(pid):
    """State letter of pid in /proc (None when gone). A killed orphan may stay a zombie
    until its new parent (init, or a container's subreaper) reaps it: dead all the same."""
    try:
        with open('/proc/%d/stat' % pid) as handle:
            return handle.read().rsplit(')', 1)[1].split()[0]
    except (IOError, OSError):
        return None


@pytest.mark.parametrize('expected, status', [(None, 'unknown'), (350.0, 'ok'), (450.0, 'warning'), (500.0, 'low')])
def test_real_h200_run_judged_against_an_expectation(monkeypatch, expected, status):
    # The real 2 x H200 run peaks at 327.22 GB/s busbw (NVLink, one node).
    args = {'from_log': fixture_path('real', 'h200x2', 'all_reduce_perf_g2.txt')}
    if expected:
        args['expected_busbw_gbs'] = expected
    result, failed = run_module(collective_bench.main, args, monkeypatch)
    assert not failed and result['verdict']['status'] == status
    if expected:
        assert result['max_busbw_gbs'] == 327.22 and result['verdict']['ratio'] == round(327.22 / expected, 3)
        assert (status == 'ok') == (result['msg'].endswith('; ok'))


def test_bad_thresholds_fail_the_task(monkeypatch):
    result, failed = run_module(collective_bench.main, {'from_log': fixture_path('real', 'h200x2', 'all_reduce.json'),
                                                        'healthy_ratio': 0.6, 'warn_ratio': 0.7}, monkeypatch)
    assert failed and 'need 0 < warn_ratio <= healthy_ratio' in result['msg']


@pytest.mark.parametrize('args, option, entry', [
    ({'env': {'NCCL_IB_HCA\0X': 'mlx5_0'}}, 'env', 'NCCL_IB_HCA'),
    ({'env': {'NCCL IB': '1'}}, 'env', 'NCCL IB'),
    ({'env': {'NCCL_IB_HCA': 'mlx5_0\0'}}, 'env', 'NCCL_IB_HCA'),
    ({'extra_args': ['-b', '8\0']}, 'extra_args', '8\\x00'),
    ({'launcher': 'mpirun', 'hosts': ['n1,n9'], 'slots_per_host': 8}, 'hosts', "'n1,n9'"),
    ({'launcher': 'mpirun', 'hosts': ['n1', '-oProxyCommand=touch /tmp/x'], 'slots_per_host': 8}, 'hosts', '-oProxyCommand'),
    ({'launcher': 'srun', 'hosts': ['n1', 'n2 n3']}, 'hosts', "'n2 n3'"),
    ({'launcher': 'mpirun', 'processes': 2, 'launcher_args': ['--mca\0']}, 'launcher_args', '--mca'),
])
def test_hostile_arguments_fail_naming_the_option(monkeypatch, args, option, entry):
    """A NUL, a comma or a leading '-' never reaches the command line: fail_json names the option
    and the entry (before: a ValueError traceback from subprocess, or an extra host / option)."""
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, required=False, opt_dirs=None: '/bin/true')
    monkeypatch.setattr(basic.AnsibleModule, 'run_command', lambda self, argv, **kw: (0, '', ''))
    result, failed = run_module(collective_bench.main, dict(args, timeout=5), monkeypatch)
    assert failed is True
    assert result['msg'].startswith(option + ':') and entry in result['msg']


def test_host_names_of_every_kind_still_pass(monkeypatch, tools):
    processes = tools(REAL_TEXT)
    result, failed = run_module(collective_bench.main, {
        'launcher': 'mpirun', 'hosts': ['gpu-node_01.cluster', '10.7.96.17', 'fe80::1'], 'slots_per_host': 1}, monkeypatch)
    assert failed is False
    assert processes.calls[0][:5] == ['/usr/bin/mpirun', '-np', '3', '--host', 'gpu-node_01.cluster:1,10.7.96.17:1,fe80::1:1']
