# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""perftest_run: from_log, argument validation, check mode, and the exact command lines
of each role (the processes are recorded, then replaced by ones that print a fixture)."""

from __future__ import annotations

import socket
import sys

import pytest

from ansible.module_utils import basic

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _perftest, _process
from ansible_collections.hpc.gpu_fabric.plugins.modules import perftest_run
from tests.unit.conftest import fixture_path, fixture_text
from tests.unit.plugins.modules.utils import run_module

REAL_POPEN = _process.subprocess.Popen
# Prints, then stays 0.2 s: a loopback server is still there when the module looks for it.
PRINTER = ('import sys, time; sys.stdout.write(sys.argv[1]); sys.stderr.write(sys.argv[2]); sys.stdout.flush(); time.sleep(0.2); '
           'sys.exit(int(sys.argv[3]))')
SWEEP = fixture_text('public', 'perftest', 'seed000_metax_ib_write_bw_host_sweep.txt')
SERVER_ROW = ('-' * 87 + '\n                    RDMA_Write BW Test\n' + '-' * 87 + '\n'
              ' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n'
              ' 8388608    5000             392.25             392.25\t\t   0.005845\n' + '-' * 87 + '\n')


class Processes(object):
    """Stands in for subprocess.Popen in _process: records each command line and runs a
    process that prints the next canned (stdout, stderr, rc) instead."""

    def __init__(self, *outputs):
        self.outputs = list(outputs)
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        stdout, stderr, rc = self.outputs[len(self.calls) - 1]
        return REAL_POPEN([sys.executable, '-c', PRINTER, stdout, stderr, str(rc)], **kwargs)


@pytest.fixture
def tools(monkeypatch):
    """perftest 'installed' in /usr/bin; returns a function installing Processes."""
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, required=False, opt_dirs=None: '/usr/bin/' + name)
    monkeypatch.setattr(_process, 'listening', lambda port, pid, proc='/proc': True)

    def install(*outputs):
        processes = Processes(*outputs)
        monkeypatch.setattr(_process.subprocess, 'Popen', processes)
        return processes

    return install


def test_from_log_seed000(monkeypatch):
    result, failed = run_module(perftest_run.main, {
        'from_log': fixture_path('public', 'perftest', 'seed000_metax_ib_write_bw_maca0_sweep.txt')}, monkeypatch)
    assert not failed and result['changed'] is False
    assert (result['status'], result['test'], result['failure']) == ('ok', 'ib_write_bw', None)
    assert len(result['results']) == 23 and result['summary']['bw_avg_gbps'] == 392.57
    assert result['settings']['gpu'] == {'vendor': 'maca', 'index': 0, 'name': 'MetaX C500', 'pci_bus_id': '0x8'}
    assert result['msg'] == 'ib_write_bw log: 392.57 Gb/s average at 8388608 bytes'


def test_from_log_latency(monkeypatch):
    result, failed = run_module(perftest_run.main, {
        'from_log': fixture_path('public', 'perftest', 'aks_ib_read_lat_hdr_vf.txt'), 'test': 'ib_read_lat'}, monkeypatch)
    assert not failed and result['status'] == 'ok' and result['test'] == 'ib_read_lat'
    assert result['summary']['lat_typical_us'] == 5.49 and result['summary']['lat_p99_us'] == 5.74
    assert result['units'] is None


def test_from_log_garbage_is_a_failed_test_not_a_failed_task(monkeypatch, tmp_path):
    log = tmp_path / 'garbage.txt'
    log.write_text('Segmentation fault (core dumped)\n\x00\x01 12 34\n')
    result, failed = run_module(perftest_run.main, {'from_log': str(log)}, monkeypatch)
    assert not failed
    assert result['status'] == 'failed' and result['failure']['kind'] == 'unparsed' and result['results'] == []
    result, failed = run_module(perftest_run.main, {'from_log': str(log), 'fail_on_error': True}, monkeypatch)
    assert failed and result['failure']['kind'] == 'unparsed'
    assert result['msg'] == 'perftest log failed (unparsed): no perftest result table in the output'


def test_from_log_real_no_device(monkeypatch):
    result, failed = run_module(perftest_run.main, {'from_log': fixture_path('real', 'cpu-vm-no-rdma', 'ibwbw.txt')}, monkeypatch)
    assert not failed and result['status'] == 'failed' and result['failure']['kind'] == 'no_device'
    assert result['failure']['message'] == 'Did not detect devices'


def test_from_log_missing_file(monkeypatch, tmp_path):
    result, failed = run_module(perftest_run.main, {'from_log': str(tmp_path / 'nope.txt')}, monkeypatch)
    assert failed and result['msg'].startswith('cannot read from_log ')


def test_from_log_runs_in_check_mode(monkeypatch):
    result, failed = run_module(perftest_run.main, {
        'from_log': fixture_path('public', 'perftest', 'dgx_spark_ib_write_bw_run_infinitely_roce.txt'), '_ansible_check_mode': True}, monkeypatch)
    assert not failed and result['status'] == 'ok' and result['summary']['rows'] == 5


@pytest.mark.parametrize('args, message', [
    ({'test': 'ib_atomic_bw', 'role': 'loopback'}, 'value of test must be one of'),
    ({'test': 'ib_write_bw', 'role': 'client'}, 'role=client needs peer, the address of the server'),
    ({'test': 'ib_write_bw', 'role': 'loopback', 'size': 65536, 'all_sizes': True}, 'size and all_sizes are mutually exclusive'),
    ({'test': 'ib_write_bw', 'role': 'loopback', 'iterations': 100, 'duration': 5}, 'mutually exclusive: iterations|duration'),
    ({'test': 'ib_write_bw', 'role': 'loopback', 'use_cuda': 0, 'use_rocm': 0}, 'mutually exclusive: use_cuda|use_rocm|use_maca'),
    ({'test': 'ib_write_bw'}, 'role is required unless from_log is given'),
    ({'role': 'server'}, 'test is required unless from_log is given'),
    ({'test': 'ib_send_lat', 'role': 'loopback', 'qps': 4}, 'qps applies to bandwidth tests only, not to ib_send_lat'),
    ({'test': 'ib_read_lat', 'role': 'loopback', 'bidirectional': True}, 'bidirectional applies to bandwidth tests only'),
    ({'test': 'ib_write_bw', 'role': 'loopback', 'iterations': 4}, 'iterations must be between 5 and 100000000'),
    ({'test': 'ib_write_bw', 'role': 'loopback', 'use_cuda_dmabuf': True}, 'use_cuda_dmabuf needs use_cuda'),
    ({'test': 'ib_write_bw', 'role': 'loopback', 'tcp_port': 70000}, 'tcp_port must be between 1 and 65535'),
    ({'test': 'ib_write_bw', 'role': 'client', 'peer': '10.0.0.1', 'client_device': 'mlx5_1'}, 'client_device applies to role=loopback only'),
    ({'test': 'ib_write_bw', 'role': 'server', 'wait_for_server': 10}, 'wait_for_server applies to role=client only'),
    ({'test': 'ib_write_bw', 'role': 'loopback', 'timeout': 0}, 'timeout must be a positive integer'),
    ({'test': 'ib_write_bw', 'role': 'server', 'sequence': [], 'address': 'a', 'run_id': 'r'}, 'sequence and role are mutually exclusive'),
    ({'test': 'ib_write_bw', 'sequence': [], 'run_id': 'r'}, 'sequence needs address'),
    ({'test': 'ib_write_bw', 'sequence': [{'tests': [{'side': 'client'}]}], 'address': 'a', 'run_id': 'r'},
     'sequence step 1: every test needs side (server or client) and peer'),
    ({'test': 'ib_write_bw', 'sequence': [{'tests': []}, {'x': 1}], 'address': 'a', 'run_id': 'r'},
     'sequence step 2: a dict with a list of tests is expected'),
    ({'test': 'ib_write_bw', 'sequence': [{'tests': [{'side': 'server', 'peer': 'b', 'use_cuda': 'x'}]}], 'address': 'a',
      'run_id': 'r'}, 'use_cuda must be an integer'),
])
def test_bad_arguments_fail_the_task(monkeypatch, tools, args, message):
    processes = tools()
    result, failed = run_module(perftest_run.main, args, monkeypatch)
    assert failed and message in result['msg']
    assert processes.calls == []


def test_missing_binary_fails_the_task(monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, required=False, opt_dirs=None: None)
    result, failed = run_module(perftest_run.main, {'test': 'ib_read_bw', 'role': 'server'}, monkeypatch)
    assert failed and result['msg'].startswith('ib_read_bw not found on PATH')


def test_missing_binary_says_so_by_kind(monkeypatch):
    # The judging tells a test that never reached the hardware from a device's failure by this kind.
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, required=False, opt_dirs=None: None)
    args = {'test': 'ib_write_bw', 'sequence': [], 'address': '10.0.0.1', 'run_id': 'r'}
    result, failed = run_module(perftest_run.main, args, monkeypatch)
    assert failed and result['failure']['kind'] == 'tool_missing' and result['failure']['message'] == result['msg']


def test_a_beacon_port_taken_fails_the_sequence_as_a_setup_failure(monkeypatch, tools):
    tools()
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        squatter.bind(('127.0.0.1', 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        args = {'test': 'ib_write_bw', 'sequence': [{'tests': [{'side': 'server', 'peer': '127.0.0.2'}]}],
                'address': '127.0.0.1', 'beacon_port': port, 'run_id': 'r'}
        result, failed = run_module(perftest_run.main, args, monkeypatch)
    finally:
        squatter.close()
    assert failed and result['status'] == 'failed'
    assert result['failure'] == {'kind': 'setup_failed', 'lines': [],
                                 'message': 'cannot listen on 127.0.0.1:%d for the benchmark beacon: Address already in use' % port}


def test_check_mode_runs_nothing(monkeypatch, tools):
    processes = tools()
    args = {'test': 'ib_write_bw', 'role': 'loopback', 'device': 'mlx5_0',
            'client_device': 'mlx5_1', '_ansible_check_mode': True}
    result, failed = run_module(perftest_run.main, args, monkeypatch)
    assert not failed and processes.calls == []
    assert (result['status'], result['skipped'], result['changed']) == ('skipped', True, False)
    assert result['cmd'] == ['/usr/bin/ib_write_bw', '-d', 'mlx5_1', '-p', '18515', '127.0.0.1']
    assert result['server_cmd'] == ['/usr/bin/ib_write_bw', '-d', 'mlx5_0', '-p', '18515']


@pytest.mark.parametrize('option', ['counters_root', 'root', None])
def test_sequence_reads_counters_below_counters_root_or_its_alias_root(monkeypatch, tools, option):
    read = []
    monkeypatch.setattr(perftest_run, 'read_ib', lambda sysroot: read.append(sysroot) or {})
    monkeypatch.setattr(perftest_run, 'error_counters', lambda ib: {'read': True})

    def run_sequence(steps, build, options, counters=None, env=None, keep_output=False, sampler=None):
        return {'steps': [], 'counters_start': counters() if counters else None, 'elapsed_s': 0.0}

    monkeypatch.setattr(perftest_run._sequence, 'run_sequence', run_sequence)
    args = {'test': 'ib_write_bw', 'sequence': [], 'address': '10.0.0.1', 'run_id': 'r'}
    if option:
        args[option] = '/srv/node1'
    result, failed = run_module(perftest_run.main, args, monkeypatch)
    assert not failed
    # With the window's counters beside them (module_utils/_window.py): a read of no device reads nothing else.
    assert result['counters_start'] == ({'read': True, 'window': {'paths': {}, 'gpu_paths': {}, 'aer': {}, 'cc': {}, 'pause': {},
                                                                  'roce': [], 'unread': {}}} if option else None)
    assert len(read) == (1 if option else 0)


def test_watch_step_is_perftest_watch_now(monkeypatch):
    result, failed = run_module(perftest_run.main, {'watch_step': 1, 'address': '10.0.0.1', 'run_id': 'r'}, monkeypatch)
    assert failed and 'watch_step' in result['msg']


def test_client_command_line_and_result(monkeypatch, tools):
    processes = tools((SWEEP, '', 0))
    result, failed = run_module(perftest_run.main, {
        'test': 'ib_write_bw', 'role': 'client', 'peer': '10.7.96.189', 'device': 'mlx5_0', 'ib_port': 1, 'gid_index': 3,
        'tcp_port': 18600, 'all_sizes': True, 'iterations': 5000, 'qps': 2, 'bidirectional': True, 'report_gbits': True,
        'disable_pcie_relaxed': True, 'extra_args': ['-F'], 'timeout': 30}, monkeypatch)
    assert processes.calls == [['/usr/bin/ib_write_bw', '-d', 'mlx5_0', '-i', '1', '-x', '3', '-p', '18600', '-a', '-n', '5000',
                                '-q', '2', '-b', '--report_gbits', '--disable_pcie_relaxed', '-F', '10.7.96.189']]
    assert not failed and result['status'] == 'ok' and result['rc'] == 0 and result['attempts'] == 1
    assert result['cmd'] == processes.calls[0] and result['role'] == 'client'
    assert result['summary']['bw_avg_gbps'] == 392.25 and len(result['results']) == 23


def test_server_command_line(monkeypatch, tools):
    processes = tools((SERVER_ROW, '', 0))
    args = {'test': 'ib_send_lat', 'role': 'server', 'device': 'mlx5_2', 'size': 64,
            'duration': 3}
    result, failed = run_module(perftest_run.main, args, monkeypatch)
    assert processes.calls == [['/usr/bin/ib_send_lat', '-d', 'mlx5_2', '-p', '18515', '-s', '64', '-D', '3']]
    assert not failed and 'attempts' not in result


def test_loopback_two_hcas_and_gpus(monkeypatch, tools):
    processes = tools((SERVER_ROW, '', 0), (SWEEP, '', 0))
    calls = []
    monkeypatch.setattr(basic.AnsibleModule, 'run_command', lambda self, args, **kw: calls.append(args) or (
        1, '      --use_cuda=<cuda device id> Use CUDA specific device\n      --use_cuda_dmabuf Use CUDA DMA-BUF\n', ''))
    result, failed = run_module(perftest_run.main, {
        'test': 'ib_write_bw', 'role': 'loopback', 'device': 'mlx5_0', 'client_device': 'mlx5_1', 'client_ib_port': 2,
        'use_cuda': 0, 'client_gpu': 1, 'use_cuda_dmabuf': True, 'size': 1048576}, monkeypatch)
    assert calls == [['/usr/bin/ib_write_bw', '--help']]
    assert processes.calls == [
        ['/usr/bin/ib_write_bw', '-d', 'mlx5_0', '-p', '18515', '-s', '1048576', '--use_cuda=0', '--use_cuda_dmabuf'],
        ['/usr/bin/ib_write_bw', '-d', 'mlx5_1', '-i', '2', '-p', '18515', '-s', '1048576', '--use_cuda=1', '--use_cuda_dmabuf', '127.0.0.1']]
    assert not failed and result['status'] == 'ok'
    assert result['server']['status'] == 'ok' and result['server']['results'][0]['bw_avg_gbps'] == 392.25
    assert result['server']['cmd'] == processes.calls[0]


def test_gpu_flag_the_build_lacks_fails_the_task(monkeypatch, tools):
    processes = tools()
    monkeypatch.setattr(basic.AnsibleModule, 'run_command', lambda self, args, **kw: (
        1, '      --use_cuda=<cuda device id> Use CUDA specific device\n', ''))
    args = {'test': 'ib_write_bw', 'role': 'loopback', 'use_cuda': 0,
            'use_cuda_dmabuf': True}
    result, failed = run_module(perftest_run.main, args, monkeypatch)
    assert failed and result['msg'] == ('/usr/bin/ib_write_bw was built without --use_cuda_dmabuf (not in its --help): '
                                        'install a perftest built with that GPU support')
    assert processes.calls == []


def test_failed_test_is_recorded_and_fail_on_error_fails(monkeypatch, tools):
    refused = "Couldn't connect to 10.0.0.9:18515\nUnable to open file descriptor for socket connection Unable to init the socket connection\n"
    tools(('', refused, 1))
    result, failed = run_module(perftest_run.main, {'test': 'ib_read_bw', 'role': 'client', 'peer': '10.0.0.9'}, monkeypatch)
    assert not failed and result['status'] == 'failed' and result['rc'] == 1
    assert result['failure'] == {'kind': 'connect_failed', 'message': "Couldn't connect to 10.0.0.9:18515", 'lines': [
        "Couldn't connect to 10.0.0.9:18515", 'Unable to open file descriptor for socket connection Unable to init the socket connection']}
    assert result['msg'] == "ib_read_bw client failed (connect_failed): Couldn't connect to 10.0.0.9:18515"
    tools(('', refused, 1))
    args = {'test': 'ib_read_bw', 'role': 'client', 'peer': '10.0.0.9',
            'fail_on_error': True}
    result, failed = run_module(perftest_run.main, args, monkeypatch)
    assert failed and result['failure']['kind'] == 'connect_failed' and result['stderr'] == refused


def test_loopback_server_failure_is_the_cause(monkeypatch, tools):
    # The server's GPU memory could not be registered; the client only saw the peer vanish.
    tools(('', "Couldn't allocate MR\nFailed to create MR\n Couldn't create IB resources\n", 1),
          ('', " Failed to exchange data between server and clients\n", 1))
    result, failed = run_module(perftest_run.main, {'test': 'ib_write_bw', 'role': 'loopback'}, monkeypatch)
    assert not failed and result['status'] == 'failed'
    assert (result['failure']['kind'], result['failure']['side']) == ('mr_failed', 'server')
    assert result['server']['failure']['kind'] == 'mr_failed'


@pytest.mark.parametrize('args, option', [
    ({'role': 'server', 'extra_args': ['-F', '--report_gbits\0']}, 'extra_args'),
    ({'role': 'client', 'peer': '-oProxyCommand=touch /tmp/x'}, 'peer'),
    ({'role': 'client', 'peer': '10.0.0.1 10.0.0.2'}, 'peer'),
    ({'role': 'server', 'device': '-h'}, 'device'),
    ({'role': 'loopback', 'client_device': 'mlx5_0,mlx5_1'}, 'client_device'),
    ({'sequence': [{'tests': [{'side': 'client', 'peer': '--help'}]}], 'address': '10.0.0.1', 'run_id': 'r'},
     'sequence step 1: peer'),
    ({'sequence': [{'tests': [{'side': 'server', 'peer': 'b', 'device': 'mlx5_0\0'}]}], 'address': '10.0.0.1', 'run_id': 'r'},
     'sequence step 1: device'),
    ({'sequence': [], 'address': '-x', 'run_id': 'r'}, 'address'),
])
def test_hostile_arguments_fail_naming_the_option(monkeypatch, args, option):
    """A NUL, a space or a leading '-' in what goes onto perftest's command line: fail_json
    naming the option (before: a ValueError traceback from subprocess, or an option of it)."""
    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', lambda self, name, required=False, opt_dirs=None: '/bin/true')
    result, failed = run_module(perftest_run.main, dict(args, test='ib_write_bw', timeout=5), monkeypatch)
    assert failed is True
    assert result['msg'].startswith(option + ':'), result['msg']


def test_build_argv_refuses_an_option_for_an_address():
    with pytest.raises(ValueError, match='peer'):
        _perftest.build_argv('ib_write_bw', 'ib_write_bw', {}, '-oProxyCommand=x')
    with pytest.raises(ValueError, match='device'):
        _perftest.build_argv('ib_write_bw', 'ib_write_bw', {'device': '--help'})
    assert _perftest.build_argv('ib_write_bw', 'ib_write_bw', {'device': 'mlx5_0'}, 'fe80::1') == [
        'ib_write_bw', '-d', 'mlx5_0', 'fe80::1']
