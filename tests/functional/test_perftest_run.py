# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""perftest_run against the perftest stand-ins (tests/sim/bin) on simulated nodes.

Through `ansible` (ad-hoc, a module process of its own per node) for loopback, two nodes
on 127.0.1.1 / 127.0.1.2 and a server that never answers; in-process for the other
failure kinds. Every run ends with no stand-in process left. The stand-ins' output is
also compared with the layout of the real captures.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process
from ansible_collections.hpc.gpu_fabric.plugins.modules import perftest_run
from tests.sim import faults, render
from tests.unit.conftest import fixture_path, fixture_text
from tests.unit.plugins.modules.utils import run_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM_BIN = os.path.join(REPO, 'tests', 'sim', 'bin')
ANSIBLE = os.path.join(os.path.dirname(sys.executable), 'ansible')
DASHES = '-' * 87


def node(tmp_path_factory, profile, *fault_names):
    prof = render.load_profile(profile)
    for name in fault_names:
        faults.apply(prof, name)
    root = str(tmp_path_factory.mktemp(profile))
    render.render(prof, root)
    return root


@pytest.fixture(scope='module')
def h100(tmp_path_factory):
    return node(tmp_path_factory, 'nvidia_h100_8x_ndr')


def free_port():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def sim_env(root, addr=None, **extra):
    env = dict(os.environ, PATH=SIM_BIN + os.pathsep + os.environ.get('PATH', ''), GF_SIM_ROOT=root, GF_SIM_PYTHON=sys.executable,
               ANSIBLE_NOCOLOR='1', ANSIBLE_CALLBACK_RESULT_FORMAT='json')  # ansible.cfg says yaml
    env.pop('GF_SIM_ADDR', None)
    env.pop('GF_SIM_PERFTEST_HANG', None)
    if addr:
        env['GF_SIM_ADDR'] = addr
    env.update(extra)
    return env


def ansible_cmd(args, check=False):
    cmd = [ANSIBLE, 'localhost', '-i', 'localhost,', '-c', 'local', '-e', 'ansible_python_interpreter=' + sys.executable,
           '-m', 'hpc.gpu_fabric.perftest_run', '-a', json.dumps(args)]
    return cmd + (['--check'] if check else [])


def result_of(completed_stdout):
    """(state, module result) of an ad-hoc run ('localhost | SUCCESS => {...}', the minimal
    callback); a skipped task prints its state only ('localhost | SKIPPED')."""
    match = re.search(r'^localhost \| (?P<state>SUCCESS|FAILED!|SKIPPED)(?: => (?P<json>\{.*\}))?\s*$', completed_stdout, re.M | re.S)
    assert match, completed_stdout[-3000:]
    state = {'SUCCESS': 'ok', 'FAILED!': 'failed', 'SKIPPED': 'skipped'}[match.group('state')]
    return state, json.loads(match.group('json')) if match.group('json') else {}


def ansible(args, env, check=False, timeout=120):
    done = subprocess.run(ansible_cmd(args, check), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return result_of(done.stdout)


def stand_ins(port):
    """PIDs of stand-in processes of this test (its unique TCP port is on their command line)."""
    found = subprocess.run(['pgrep', '-f', r'tools_perftest\.py ib_.* -p %d( |$)' % port], capture_output=True, text=True, check=False)
    return found.stdout.split()


def leftovers(root):
    """`pgrep -f tools_perftest`, narrowed to the stand-ins of the node at ``root`` (their
    environment), so that stand-ins of other test runs on this machine do not count."""
    found = subprocess.run(['pgrep', '-f', 'tools_perftest'], capture_output=True, text=True, check=False).stdout.split()
    mine = []
    for pid in found:
        try:
            with open('/proc/%s/environ' % pid, 'rb') as handle:
                environ = b'\0' + handle.read()
        except (IOError, OSError):
            continue
        if b'\0GF_SIM_ROOT=' + root.encode() + b'\0' in environ:
            mine.append(pid)
    return mine


def test_loopback_ok_through_ansible(h100):
    port = free_port()
    state, result = ansible({'test': 'ib_write_bw', 'role': 'loopback', 'device': 'mlx5_0', 'client_device': 'mlx5_1',
                             'tcp_port': port, 'all_sizes': True, 'report_gbits': True, 'timeout': 60}, sim_env(h100))
    assert state == 'ok' and result['status'] == 'ok' and result['failure'] is None, result.get('msg')
    assert [r['bytes'] for r in result['results']] == [2 ** i for i in range(1, 24)]
    # 400 Gb/s (4X NDR) ports: >= 90 % of the rate at 8 MiB (fabric_bench_bw_ratio), never above it.
    assert 360 <= result['summary']['bw_avg_gbps'] <= 400 and result['summary']['bytes'] == 8388608
    assert result['results'][0]['bw_avg_gbps'] < 0.1 < result['results'][10]['bw_avg_gbps']
    assert result['settings']['device'] == 'mlx5_1' and result['settings']['link_type'] == 'IB'
    assert result['settings']['mtu_bytes'] == 4096 and result['settings']['memory'] == 'host'
    assert result['server']['status'] == 'ok' and result['server']['rc'] == 0
    assert result['server']['results'] == [result['results'][-1]]          # write_bw server prints the client's last row
    assert result['cmd'][-1] == '127.0.0.1' and '-a' in result['server']['cmd']
    assert result['changed'] is False
    assert stand_ins(port) == [] and leftovers(h100) == []


def test_two_nodes_through_ansible(tmp_path_factory, h100):
    """Server on 127.0.1.1 with a port trained at 1X (100 of 400 Gb/s), client on 127.0.1.2."""
    degraded = node(tmp_path_factory, 'nvidia_h100_8x_ndr', 'rate_degraded_1x')
    port = free_port()
    args = {'test': 'ib_write_bw', 'device': 'mlx5_0', 'tcp_port': port, 'size': 1048576, 'report_gbits': True, 'timeout': 60}
    server = subprocess.Popen(ansible_cmd(dict(args, role='server')), cwd=REPO, env=sim_env(degraded, '127.0.1.1'),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Started together: the client tries again until the server listens.
        state, client = ansible(dict(args, role='client', peer='127.0.1.1', wait_for_server=30), sim_env(h100, '127.0.1.2'))
        out, _err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert state == 'ok' and client['status'] == 'ok', client.get('msg')
    # The healthy client is held to the slower end's rate: it came over the exchange.
    assert 90 <= client['summary']['bw_avg_gbps'] <= 100
    server_state, served = result_of(out)
    assert server_state == 'ok' and served['status'] == 'ok'
    assert served['results'][0]['bw_avg_gbps'] == client['results'][0]['bw_avg_gbps']
    assert served['settings']['device'] == 'mlx5_0' and 'tx_depth' not in served['settings']   # no TX depth on a server
    assert client['attempts'] >= 1
    assert stand_ins(port) == [] and leftovers(degraded) == [] and leftovers(h100) == []


def test_server_that_never_answers_is_killed(h100):
    port = free_port()
    env = sim_env(h100, GF_SIM_PERFTEST_HANG='1')
    run = subprocess.Popen(ansible_cmd({'test': 'ib_send_bw', 'role': 'loopback', 'tcp_port': port, 'timeout': 4}),
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    deadline = time.time() + 30
    while run.poll() is None and time.time() < deadline:
        seen = seen or (stand_ins(port) and leftovers(h100))
        time.sleep(0.1)
    out, _err = run.communicate(timeout=30)
    assert len(seen) >= 1                     # both patterns find the stand-ins while they run
    state, result = result_of(out)
    assert state == 'ok' and result['status'] == 'failed'
    assert result['failure']['kind'] == 'timeout' and result['failure']['side'] == 'client'
    assert result['server']['killed'] is True and result['server']['rc'] < 0
    # Killed at the deadline (4 s after the server started), not before, and not much later.
    assert 4.0 <= result['server']['elapsed_s'] <= 12
    assert stand_ins(port) == [] and leftovers(h100) == []


def run_in_process(monkeypatch, root, args, **env):
    monkeypatch.setenv('PATH', SIM_BIN + os.pathsep + os.environ.get('PATH', ''))
    monkeypatch.setenv('GF_SIM_ROOT', root)
    monkeypatch.setenv('GF_SIM_PYTHON', sys.executable)
    monkeypatch.delenv('GF_SIM_ADDR', raising=False)
    monkeypatch.delenv('GF_SIM_PERFTEST_HANG', raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return run_module(perftest_run.main, args, monkeypatch)


def test_server_dies_mid_run(monkeypatch, h100):
    """The node at the other end dies during a sweep: the sizes done are kept."""
    port = free_port()
    env = sim_env(h100, GF_SIM_PERFTEST_MAX_S='4')
    server = subprocess.Popen([os.path.join(SIM_BIN, 'ib_write_bw'), '-d', 'mlx5_0', '-a', '-p', str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while not _process.listening(port, server.pid) and time.time() < deadline:
            time.sleep(0.02)
        killer = threading.Timer(1.5, server.kill)
        killer.start()
        result, failed = run_in_process(monkeypatch, h100, {'test': 'ib_write_bw', 'role': 'client', 'peer': '127.0.0.1',
                                                            'tcp_port': port, 'all_sizes': True, 'timeout': 30},
                                        GF_SIM_PERFTEST_MAX_S='4')
        killer.join()
    finally:
        server.kill()
        server.wait()
    assert not failed and result['status'] == 'failed' and result['rc'] == 1
    assert (result['failure']['kind'], result['failure']['message']) == ('completion_error', 'Completion with error at client')
    assert 'Failed status 12: wr_id 0 syndrom 0x81' in result['failure']['lines']
    assert 1 <= len(result['results']) < 23
    assert [r['bytes'] for r in result['results']] == [2 ** i for i in range(1, len(result['results']) + 1)]
    assert stand_ins(port) == []


def test_client_cannot_connect(monkeypatch, h100):
    port = free_port()
    result, failed = run_in_process(monkeypatch, h100, {'test': 'ib_read_bw', 'role': 'client', 'peer': '127.0.0.1', 'tcp_port': port})
    assert not failed and result['status'] == 'failed' and result['rc'] == 1
    assert result['failure']['kind'] == 'connect_failed'
    assert result['failure']['message'] == "Couldn't connect to 127.0.0.1:%d" % port
    assert result['stderr'].endswith('Unable to open file descriptor for socket connection Unable to init the socket connection\n')
    assert stand_ins(port) == []


def test_busy_port(monkeypatch, h100):
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(('0.0.0.0', 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        start = time.time()
        result, failed = run_in_process(monkeypatch, h100, {'test': 'ib_write_lat', 'role': 'loopback', 'tcp_port': port, 'timeout': 20})
        # Someone else's listener is not taken for the server: no client was started against it.
        assert time.time() - start < 10
    finally:
        taken.close()
    assert not failed and result['status'] == 'failed'
    assert result['failure'] == {'kind': 'connect_failed', 'side': 'server', 'message': "Couldn't listen to port %d" % port,
                                 'lines': ["Couldn't listen to port %d" % port,
                                           'Unable to open file descriptor for socket connection Unable to init the socket connection']}
    assert result['server']['rc'] == 1 and result['server']['killed'] is False
    assert 'Waiting for client to connect' in result['server']['stdout']
    assert stand_ins(port) == []


def test_no_device_like_the_real_tool(monkeypatch, tmp_path_factory):
    vm = node(tmp_path_factory, 'no_rdma_vm')
    result, failed = run_in_process(monkeypatch, vm, {'test': 'ib_write_bw', 'role': 'client', 'peer': '127.0.0.1',
                                                      'device': 'mlx5_0', 'tcp_port': free_port()})
    assert not failed and result['status'] == 'failed' and result['failure']['kind'] == 'no_device'
    assert result['failure']['message'] == 'Did not detect devices'
    real = fixture_text('real', 'cpu-vm-no-rdma', 'ibwbw_client.txt')
    assert (result['rc'], result['stdout'], result['stderr']) == (1, '', real)


def test_garbage_log(monkeypatch, tmp_path):
    log = tmp_path / 'truncated.txt'
    # A run cut off after its banner, then line noise.
    log.write_text(fixture_text('public', 'perftest', 'deepops_roce_ib_write_bw_rdma_cm_cpufreq_warn.txt').split(' #bytes', maxsplit=1)[0] + '@@@ 1 2\n')
    result, failed = run_module(perftest_run.main, {'from_log': str(log), 'role': 'client'}, monkeypatch)
    assert not failed and result['status'] == 'failed' and result['failure']['kind'] == 'unparsed'
    assert result['settings']['device'] == 'mlx5_0' and result['results'] == []


@pytest.mark.parametrize('gpu, low, high', [(0, 360, 400), (7, 200, 260)])
def test_gpu_memory_near_and_across_numa(monkeypatch, h100, gpu, low, high):
    """GPU0 shares mlx5_0's PCIe switch (PIX); GPU7 is on the other socket (SYS): ~60 %."""
    result, failed = run_in_process(monkeypatch, h100, {'test': 'ib_write_bw', 'role': 'loopback', 'device': 'mlx5_0',
                                                        'use_cuda': gpu, 'size': 4194304, 'report_gbits': True,
                                                        'tcp_port': free_port()})
    assert not failed and result['status'] == 'ok', result['msg']
    assert low <= result['summary']['bw_avg_gbps'] <= high
    assert result['settings']['memory'] == 'cuda' and result['settings']['gpu']['index'] == gpu
    assert result['settings']['gpu']['name'] == 'NVIDIA H100 80GB HBM3'


def test_gpu_memory_without_peer_memory(monkeypatch, tmp_path_factory):
    root = node(tmp_path_factory, 'nvidia_h100_8x_ndr', 'peermem_not_loaded')
    args = {'test': 'ib_write_bw', 'role': 'loopback', 'use_cuda': 0, 'tcp_port': free_port()}
    result, failed = run_in_process(monkeypatch, root, args)
    assert not failed and result['status'] == 'failed'
    assert (result['failure']['kind'], result['failure']['message']) == ('mr_failed', "Couldn't allocate MR")
    # dma-buf needs no peer-memory module (kernel 5.15, open kernel module).
    result, failed = run_in_process(monkeypatch, root, dict(args, use_cuda_dmabuf=True, tcp_port=free_port()))
    assert not failed and result['status'] == 'ok' and result['settings']['dmabuf'] is True


def test_locked_memory_limit_refuses_the_buffer(monkeypatch, tmp_path_factory):
    # 64 KiB (the old distro default) against 2 x 8 MiB: ibv_reg_mr fails with ENOMEM, and
    # perftest prints the same words as for GPU memory without a peer-memory client.
    root = node(tmp_path_factory, 'nvidia_h100_8x_ndr', 'memlock_limited')
    result, failed = run_in_process(monkeypatch, root, {'test': 'ib_write_bw', 'role': 'loopback', 'tcp_port': free_port()})
    assert not failed and result['status'] == 'failed'
    assert (result['failure']['kind'], result['failure']['message']) == ('mr_failed', "Couldn't allocate MR")
    # 2 KiB messages fit below 64 KiB.
    result, failed = run_in_process(monkeypatch, root, {'test': 'ib_write_bw', 'role': 'loopback', 'size': 2048,
                                                        'tcp_port': free_port()})
    assert not failed and result['status'] == 'ok', result.get('failure')


@pytest.mark.parametrize('build, args, missing', [
    ('cuda', {'use_cuda': 0, 'use_cuda_dmabuf': True}, '--use_cuda_dmabuf'),   # HAVE_CUDA without HAVE_CUDA_DMABUF
    (None, {'use_rocm': 0}, '--use_rocm'),                                     # the NVIDIA node's build has no ROCm
])
def test_gpu_flags_the_build_lacks(monkeypatch, h100, build, args, missing):
    extra = {'GF_SIM_PERFTEST_BUILD': build} if build is not None else {}
    if build is None:
        monkeypatch.delenv('GF_SIM_PERFTEST_BUILD', raising=False)
    result, failed = run_in_process(monkeypatch, h100, dict(args, test='ib_write_bw', role='loopback', tcp_port=free_port()), **extra)
    assert failed and result['msg'] == ('%s/ib_write_bw was built without %s (not in its --help): install a perftest built with '
                                        'that GPU support' % (SIM_BIN, missing))


def test_roce_gid_index_without_gid(monkeypatch, tmp_path_factory):
    root = node(tmp_path_factory, 'amd_mi300x_roce')
    device = sorted(os.listdir(os.path.join(root, 'sys/class/infiniband')))[0]
    result, failed = run_in_process(monkeypatch, root, {'test': 'ib_send_lat', 'role': 'loopback', 'device': device,
                                                        'gid_index': 200, 'tcp_port': free_port()})
    assert not failed and result['status'] == 'failed'
    assert result['failure']['kind'] == 'qp_transition_failed'
    assert re.match(r'Failed to modify QP \d+ to RTR$', result['failure']['message'])
    result, failed = run_in_process(monkeypatch, root, {'test': 'ib_send_lat', 'role': 'loopback', 'device': device,
                                                        'gid_index': 3, 'tcp_port': free_port(), 'all_sizes': True})
    assert not failed and result['status'] == 'ok', result['msg']
    assert result['settings']['link_type'] == 'Ethernet' and result['settings']['gid_index'] == 3
    assert 1.0 < result['summary']['lat_typical_us'] < 3.0 and len(result['results']) == 23


def test_passive_read_lat_server(monkeypatch, h100):
    result, failed = run_in_process(monkeypatch, h100, {'test': 'ib_read_lat', 'role': 'loopback', 'tcp_port': free_port(), 'size': 64})
    assert not failed and result['status'] == 'ok'
    assert result['server']['status'] == 'ok' and result['server']['results'] == []
    assert result['results'][0]['bytes'] == 64 and result['results'][0]['lat_stdev_us'] == 0.0


def test_check_mode_through_ansible(h100):
    port = free_port()
    # The task shows as skipped (like ansible.builtin.command in check mode); what it
    # returns is checked in the unit tests.
    state, _result = ansible({'test': 'ib_write_bw', 'role': 'loopback', 'tcp_port': port}, sim_env(h100), check=True)
    assert state == 'skipped'
    assert stand_ins(port) == []


# ---- the stand-ins' output against the real captures

def run_pair(root, tool, args, port):
    env = sim_env(root)
    server = subprocess.Popen([os.path.join(SIM_BIN, tool)] + args + ['-p', str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        while not _process.listening(port, server.pid) and time.time() < deadline:
            time.sleep(0.02)
        client = subprocess.run([os.path.join(SIM_BIN, tool)] + args + ['-p', str(port), '127.0.0.1'], env=env,
                                capture_output=True, text=True, timeout=30, check=False)
        server_out, _err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return client, server_out


def avg_of(line):
    return float(line.split()[3])


def offsets(line):
    return [m.start() for m in re.finditer(r'\S+', line)]


def test_bw_layout_matches_the_real_output(h100):
    client, _server = run_pair(h100, 'ib_write_bw', ['-d', 'mlx5_0', '-a', '--report_gbits'], free_port())
    assert client.returncode == 0, client.stderr
    lines = client.stdout.splitlines()
    real = fixture_text('public', 'perftest', 'aks_ib_write_bw_hdr_sweep_gbits.txt').splitlines()
    assert real[0] == DASHES and lines.count(DASHES) == 4
    header = lines.index(real[1])                       # the header line, byte for byte
    rows = lines[header + 1:header + 24]
    compared = 0
    for mine, theirs in zip(rows, real[2:25]):
        # Tabs as perftest prints them (REPORT_FMT); the capture has them expanded.
        assert mine.split()[0] == theirs.split()[0]
        if ('.' in theirs.split()[2] and len(theirs.split()[2].split('.')[1]) == 6) != (avg_of(mine) < 0.1):
            continue  # one prints 6 decimals (average below 0.1 Gb/s), the other 2: other columns
        compared += 1
        assert offsets(mine.expandtabs(8)) == offsets(theirs), (mine, theirs)
    assert compared >= 20
    assert lines[header + 24] == DASHES
    # Banner: the two-field lines of a 6.06-era capture, tabs expanded.
    banner = [line.expandtabs(8) for line in lines]
    deepops = fixture_text('public', 'perftest', 'deepops_roce_ib_write_bw_rdma_cm_cpufreq_warn.txt').splitlines()
    for expected in deepops[1:4]:
        assert expected in banner
    assert '                    RDMA_Write BW Test' in lines


def test_lat_header_and_version(h100):
    client, server_out = run_pair(h100, 'ib_send_lat', ['-d', 'mlx5_1'], free_port())
    assert client.returncode == 0, client.stderr
    # RESULT_FMT_LAT ends with a space; the capture's lines were trimmed.
    real = fixture_text('public', 'perftest', 'aks_ib_read_lat_hdr_vf.txt').splitlines()
    assert real[1] + ' ' in client.stdout.splitlines() and real[1] + ' ' in server_out.splitlines()
    version = subprocess.run([os.path.join(SIM_BIN, 'ib_read_bw'), '--version'], env=sim_env(fixture_path('real')),
                             capture_output=True, text=True, check=False)
    # Without a simulated node root it refuses; with one: 'Version: 6.06', exit 1 (what perftest 6.06
    # answers on a real node: its version, and exit status 1).
    assert version.returncode == 1 and 'GF_SIM_ROOT' in version.stderr
    version = subprocess.run([os.path.join(SIM_BIN, 'ib_read_bw'), '--version'], env=sim_env(h100), capture_output=True, text=True, check=False)
    assert (version.returncode, version.stdout, version.stderr) == (1, 'Version: 6.06\n', '')
