# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""benchmark.yml (role fabric_bench) on a local simulated cluster with faults.

Four nodes and a dead one: a GPU far from its HCA (cross_numa) must show as GPU memory
far below host memory on that rail; a node whose perftest servers hang must give timeout
records for its pairs and leave no process behind; the dead node is left out; every
healthy pair's result is kept.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
import sys

import pytest
import yaml

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(REPO, 'tests', 'lab', 'netns.sh')
# The hung server is killed at fabric_bench_timeout; clients may wait longer for a server to
# listen on a loaded CI machine.
OPTIONS = {'fabric_bench_hcas': ['mlx5_0'], 'fabric_bench_timeout': 8, 'fabric_bench_wait_for_server': 15}
# Tests run in parallel (pytest -n) on local clusters with the same 127.0.1.x addresses:
# each its own ports.
PORTS = {'sequence': {'fabric_bench_base_port': 19515, 'fabric_bench_beacon_port': 19514},
         'rounds': {'fabric_bench_base_port': 20515, 'fabric_bench_beacon_port': 20514}}
DEAD = {'dead1': {'ansible_connection': 'ssh', 'ansible_host': '127.0.0.1', 'ansible_port': 9,
                  'ansible_ssh_common_args': '-o ConnectTimeout=3 -o StrictHostKeyChecking=no'}}


def _environ_mentions(pid, text):
    try:
        with open('/proc/%s/environ' % pid, 'rb') as handle:
            return text.encode() in handle.read()
    except (IOError, OSError):
        return False


@pytest.mark.parametrize('engine', ['sequence', 'rounds'])
def test_pairwise_benchmark_with_faults(tmp_path, engine):
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'n1', 'profile': 'nvidia_h100_8x_ndr'},
                      {'name': 'n2', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['cross_numa']},
                      {'name': 'n3', 'profile': 'nvidia_h100_8x_ndr'},
                      {'name': 'hang', 'profile': 'nvidia_h100_8x_ndr'}]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable, extra_hosts=DEAD)
    hosts = inventory['all']['children']['gpu_nodes']['hosts']
    hosts['hang']['gpu_fabric_environment']['GF_SIM_PERFTEST_HANG'] = '1'
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    out = os.path.join(dest, 'out')
    os.makedirs(out)
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'benchmark.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           # The pairwise benchmark alone (the collective has its own tests), turned off as a user types it:
           # key=value makes it the string "false".
           '-e', json.dumps(dict(OPTIONS, fabric_bench_engine=engine, **PORTS[engine])), '-e', 'gpu_fabric_collective_enabled=false',
           # The older per-round engine in host memory only (its mechanics: rounds, timeouts, a dead
           # node); GPU memory is the sequence engine's case. Saves a minute of CI.
           '-e', json.dumps({'fabric_bench_memory': ['host', 'gpu'] if engine == 'sequence' else ['host']}),
           # This test's own async job files: none may be left on a node once its records are collected.
           '-e', 'ansible_async_dir=' + os.path.join(dest, 'async')]
    memories = ('host', 'gpu') if engine == 'sequence' else ('host',)
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    stats = recap(result)
    assert stats['dead1']['unreachable'] == 1, result.stdout[-3000:]
    assert all(stats[h]['failed'] == 0 for h in ('n1', 'n2', 'n3', 'hang', 'localhost')), result.stdout[-3000:]
    # Nothing failed and was rescued either (the benchmark block keeps a failed task for the report).
    assert all(stats[h]['rescued'] == 0 for h in ('n1', 'n2', 'n3', 'hang')), result.stdout[-3000:]
    # The collective role off: one skipped include (not shown: display_skipped_hosts is off), none of its tasks.
    assert 'fabric_collective : ' not in result.stdout and 'Run the collective benchmark over the fleet' not in result.stdout
    if engine == 'rounds':
        assert 'host memory: round 3 of 3' in result.stdout and 'gpu memory' not in result.stdout   # progress

    with open(os.path.join(out, 'bench.json')) as handle:
        bench = json.load(handle)
    pairs = dict(((p['memory'], frozenset((p['server'], p['client']))), p) for p in bench['pairs'])
    # 4 live nodes: 6 pairs on one rail, in each memory kind; the dead node is in none.
    assert len(bench['pairs']) == 6 * len(memories) and not any('dead1' in key for _m, key in pairs)
    assert set(p['memory'] for p in bench['pairs']) == set(memories)
    hung_servers = [p for p in bench['pairs'] if p['server'] == 'hang']
    assert hung_servers
    for pair in hung_servers:
        # The server accepts and never answers: killed at the timeout, its client then reads EOF
        # (perftest: "ethernet_read_keys: Couldn't read remote address") or times out itself.
        assert pair['status'] == 'failed' and pair['failure']['kind'] in ('timeout', 'exchange_failed'), pair
    unhealthy = [p for p in bench['pairs'] if p['status'] != 'ok' and 'hang' not in (p['server'], p['client'])]
    assert unhealthy == []
    healthy = pairs[('host', frozenset(('n1', 'n3')))]
    assert healthy['verdict'] == 'ok' and healthy['bw_avg_gbps'] > 0.9 * 400
    if 'gpu' in memories:
        far = [pairs[('gpu', frozenset((peer, 'n2')))] for peer in ('n1', 'n3')]
        assert all(p['verdict'] == 'low' and p['gpu_vs_host'] < 0.9 for p in far), far
    assert bench['matrix']['host']['0']
    # The console: the counts, then the pairs that are not healthy one plain line each (fabric_bench_judge's lines),
    # no Python repr of the pairs and their reasons.
    counts = ', '.join('%d %s' % (bench['verdicts'][v], v) for v in ('ok', 'low', 'failed') if v in bench['verdicts'])
    assert 'ib_write_bw: %d pair test(s), %s\n' % (len(bench['pairs']), counts) in result.stdout, result.stdout[-3000:]
    assert re.search(r'\n *hang mlx5_\d+ -> n\d mlx5_\d+, host memory, failed \((timeout|exchange_failed): ', result.stdout)
    assert "'reasons'" not in result.stdout and "[['" not in result.stdout
    if engine == 'sequence':
        # Each node's records went into a file beside the report (the raw results never into hostvars),
        # and the judging read them back; the job files on the nodes were removed once read.
        assert sorted(os.listdir(os.path.join(out, 'bench-records'))) == [
            '%s.records.json.gz' % h for h in ('hang', 'n1', 'n2', 'n3')]
        assert 'records_unreadable' not in bench
        assert os.path.isdir(os.path.join(dest, 'async')) and os.listdir(os.path.join(dest, 'async')) == []
        # Each test's window was read (AER, congestion and pause counters, PCIe links: module_utils/_window.py) on
        # every node that ran tests; on these healthy links nothing in it rose, so bench.json holds none of them.
        assert bench['windowed'] == ['hang', 'n1', 'n2', 'n3'] and bench['windows'] == []
    # Nothing of the benchmark outlives it, on any node (they all share this machine).
    # This test's stand-ins only (other tests run in parallel): they carry its port.
    leftover = subprocess.run(['pgrep', '-f', r'tools_perftest\.py .* -p %d( |$)' % PORTS[engine]['fabric_bench_base_port']],
                              capture_output=True, text=True, check=False)
    assert leftover.stdout == ''


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists('/usr/sbin/sshd'),
                    reason='the SSH lab needs root and openssh-server')
def test_sequence_over_ssh_survives_a_node_dying_a_busy_port_and_garbage(tmp_path):
    """Four nodes over real SSH (network namespaces), the whole validate_fabric.yml with the
    benchmark: node n4 is killed in the middle of the run, a foreign process holds n3's
    perftest port, n2's clients die mid-table. The run completes, bench.json keeps every
    healthy pair, each failure has its kind, the report is written and names n4 as lost
    mid-run (the cause of its pairs' failures), and no perftest process is left anywhere."""
    dest = str(tmp_path)
    lab = os.path.join(dest, 'lab')
    env = dict(os.environ, LAB_DIR=lab)
    spec = {'nodes': [{'name': 'n%d' % i, 'profile': 'homelab_cx4'} for i in range(1, 5)]}
    up = subprocess.run(['bash', LAB, 'up', '4'], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert up.returncode == 0, up.stderr
    squatter = None
    try:
        inventory = cluster.build(spec, dest, 'netns', key=os.path.join(lab, 'id_ed25519'))
        hosts = inventory['all']['children']['gpu_nodes']['hosts']
        hosts['n2']['gpu_fabric_environment']['GF_SIM_PERFTEST_GARBAGE'] = '1'
        for host in hosts.values():   # tests long enough to kill a node in the middle
            host['gpu_fabric_environment']['GF_SIM_PERFTEST_MAX_S'] = '1.5'
        with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
            yaml.safe_dump(inventory, handle)
        # Another program listens on n3's perftest port (18515, rail 0) and never answers.
        squatter = subprocess.Popen(['ip', 'netns', 'exec', 'gf-node3', sys.executable, '-c',
                                     'import socket, time\ns = socket.socket()\ns.bind(("%s", 18515))\ns.listen(8)\n'
                                     'time.sleep(900)' % hosts['n3']['ansible_host']])
        out = os.path.join(dest, 'out')
        os.makedirs(out)
        cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
               '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
               # 1 MiB messages: homelab's 8 MiB memlock (seed 002 before its setup) refuses 2 x 8 MiB buffers.
               '-e', json.dumps({'fabric_bench_memory': ['host'], 'fabric_bench_timeout': 8, 'fabric_bench_wait_for_server': 4,
                                 'fabric_bench_size': 1048576, 'fabric_bench_iterations': 20000,   # ~1.5 s per test
                                 'fabric_bench_dead_after': 3, 'fabric_bench_start_grace': 20, 'gpu_fabric_benchmark': True,
                                 'gpu_fabric_collective_enabled': False})]
        play = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, ANSIBLE_NOCOLOR='1'))

        def kill_n4_mid_run():
            # Once n4's beacon answers (its sequence runs), let it get into round 1 or 2 of 3.
            deadline = time.time() + 300
            while time.time() < deadline:
                try:
                    socket.create_connection((hosts['n4']['ansible_host'], 18514), 0.5).close()
                    break
                except OSError:
                    time.sleep(0.1)
            time.sleep(2.0)
            subprocess.run(['bash', LAB, 'kill-node', '4'], env=env, check=True, timeout=60)

        killer = threading.Thread(target=kill_n4_mid_run, daemon=True)
        killer.start()
        lines = list(play.stdout)
        play.wait(timeout=600)
        killer.join(60)
        stdout = ''.join(lines)
        stats = recap(subprocess.CompletedProcess(cmd, play.returncode, stdout, ''))
        assert stats['n4']['unreachable'] >= 1, stdout[-3000:]
        assert all(stats[h]['failed'] == 0 for h in ('n1', 'n2', 'n3')), stdout[-3000:]
        # The controller fails once, at the very end: the exit policy (the report is written before).
        assert stats['localhost']['failed'] <= 1 and 'exit policy' in stdout, stdout[-3000:]
        with open(os.path.join(out, 'bench.json')) as handle:
            bench = json.load(handle)
        pairs = dict((frozenset((p['server'], p['client'])), p) for p in bench['pairs'])
        assert len(pairs) == 6, sorted(tuple(sorted(k)) for k in pairs)   # every pair shows, the lost node's too
        # n2's clients die mid-table; n3 cannot serve (port taken); n4 is lost.
        for peer in ('n1', 'n2', 'n3'):
            lost = pairs[frozenset((peer, 'n4'))]
            # n2's own clients crash (garbage) whenever they run: before n4 died that is what its pair shows.
            kinds = ('peer_lost', 'node_lost', 'connect_failed') + (('unparsed',) if lost['client'] == 'n2' else ())
            assert lost['verdict'] == 'failed' and lost['failure']['kind'] in kinds, lost
        for pair in bench['pairs']:
            assert pair['verdict'] == 'failed' or {'n2', 'n3', 'n4'}.isdisjoint((pair['server'], pair['client'])) or \
                (pair['client'] != 'n2' and pair['server'] != 'n3' and 'n4' not in (pair['server'], pair['client'])), pair
            if pair['client'] == 'n2' and pair['server'] != 'n4':
                assert pair['failure']['kind'] == 'unparsed', pair
            if pair['server'] == 'n3' and pair['client'] not in ('n2', 'n4'):
                # peer_moved_on: n3's server failed at once and n3 went on before the client's probe saw
                # it at this step (a loaded machine); the server side's cause is still attached below.
                assert pair['failure']['kind'] in ('timeout', 'exchange_failed', 'connect_failed', 'peer_moved_on'), pair
                assert "Couldn't listen to port 18515" in pair['reasons'][-1], pair   # the cause, from the server side
        healthy = [p for p in bench['pairs'] if p['status'] == 'ok']
        assert healthy and all(p['bw_avg_gbps'] > 0 for p in healthy)
        # The report names n4 as lost mid-run and blames its pairs on that, keeps the others' results.
        with open(os.path.join(out, 'report.json')) as handle:
            report = json.load(handle)
        lost = [f for f in report['findings'] if f['code'] == 'HOST_LOST']
        assert [f['host'] for f in lost] == ['n4'] and lost[0]['explained_by'] is None, lost
        assert lost[0]['evidence']['missing'] == ['benchmark']
        n4_pairs = [f for f in report['findings'] if f['code'] == 'BENCH_PAIR_FAILED' and 'n4' in f['hosts']]
        assert n4_pairs and all(f['explained_by'] == lost[0]['id'] for f in n4_pairs), n4_pairs
        assert len(report['bench']['pairs']) == 6 and os.path.getsize(os.path.join(out, 'report.html')) > 10000
        # This test's stand-ins only (other tests run in parallel): they carry its port.
        # Narrowed to this test's nodes (their roots below dest): the demo test's local nodes
        # may run stand-ins on the same default port at the same time.
        found = subprocess.run(['pgrep', '-f', r'tools_perftest\.py .* -p 18515( |$)'], capture_output=True, text=True,
                               check=False).stdout.split()
        assert [pid for pid in found if _environ_mentions(pid, dest)] == []
    finally:
        if squatter is not None:
            squatter.kill()
            squatter.wait()
        down = subprocess.run(['bash', LAB, 'down'], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr


# Its own ports (tests run in parallel on the same 127.0.1.x addresses, and a user's demo may run beside them).
HELD_PORTS = {'fabric_bench_base_port': 22515, 'fabric_bench_beacon_port': 22514}


def test_a_beacon_port_taken_is_the_run_that_broke_never_a_device(tmp_path):
    """Another program listens on n2's beacon port (another run, a leftover server): n2's sequence
    cannot start and its peers never see it. No test reached the hardware, so the report says the run
    broke (BENCH_RUN_BROKEN: the port, the message, the nodes), gives no device verdict and no node an
    error of it, keeps the healthy pair's result, and the run fails."""
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'n%d' % i, 'profile': 'nvidia_h100_8x_ndr'} for i in (1, 2, 3)]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    address = inventory['all']['children']['gpu_nodes']['hosts']['n2']['ansible_host']
    out = os.path.join(dest, 'out')
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        squatter.bind((address, HELD_PORTS['fabric_bench_beacon_port']))
        squatter.listen(8)
        cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
               '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
               '-e', json.dumps(dict(OPTIONS, fabric_bench_memory=['host'], fabric_bench_start_grace=5, fabric_bench_dead_after=3,
                                     gpu_fabric_benchmark=True, gpu_fabric_collective_enabled=False, **HELD_PORTS)),
               '-e', 'ansible_async_dir=' + os.path.join(dest, 'async')]
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                                env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    finally:
        squatter.close()
    # The run fails (the exit policy: BENCH_RUN_BROKEN is a root error), after the report is written.
    assert result.returncode != 0 and 'exit policy' in result.stdout, result.stdout[-3000:]
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    broken = [f for f in report['findings'] if f['code'] == 'BENCH_RUN_BROKEN']
    assert len(broken) == 1 and broken[0]['explained_by'] is None and broken[0]['host'] is None, broken
    item = broken[0]
    where = '%s:%d' % (address, HELD_PORTS['fabric_bench_beacon_port'])
    assert 'cannot listen on %s for the benchmark beacon: Address already in use' % where in item['cause'], item['cause']
    assert item['evidence']['failed_on'] == ['n2'] and item['evidence']['nodes'] == ['n1', 'n2', 'n3'], item['evidence']
    assert [(c['host'], c['kind']) for c in item['evidence']['causes']] == [('n2', 'setup_failed')], item['evidence']
    # Every pair with n2 failed, the healthy pair passed; none of them is a device's symptom or verdict.
    pairs = dict((frozenset((p['server'], p['client'])), p) for p in report['bench']['pairs'])
    assert pairs[frozenset(('n1', 'n3'))]['verdict'] == 'ok'
    with_n2 = [p for k, p in pairs.items() if 'n2' in k]
    assert with_n2 and all(p['verdict'] == 'failed' for p in with_n2) and item['evidence']['tests'] == len(with_n2)
    codes = set(f['code'] for f in report['findings'])
    assert not codes & {'BENCH_DEVICE_UNEXPLAINED', 'BENCH_PAIR_FAILED', 'BENCH_PAIR_LOW', 'BENCH_GPU_MEMORY_FAILED'}, codes
    # No node is blamed: the facts of all three are healthy.
    assert [report['hosts'][h]['status'] for h in ('n1', 'n2', 'n3')] == ['ok', 'ok', 'ok'], report['hosts']
