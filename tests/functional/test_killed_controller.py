# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A SIGKILLed controller leaves nothing of ours running. ansible-playbook killed while offline.yml
unpacks the snapshots: the worker that unpacks (ansible-core forks one per task and leaves it
running when its ansible-playbook dies) stops within seconds (plugin_utils/_controller_watch.py).
ansible killed while perftest_run waits on a server that never answers: the module stops its
perftest stand-ins within seconds (module_utils/_process.py ParentWatch), also with
ANSIBLE_ASYNC_DIR in the controller's environment, as scripts/demo.sh has it."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest
import yaml

from tests import processes
from tests.sim import cluster
from tests.functional.test_perftest_run import ansible_cmd, free_port, leftovers, node, sim_env

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='the test reads /proc (Linux)')

# Eight snapshots of small files: 10-30 s of unpacking in all on a 2-core machine (750 to 2,400
# files a second measured here), so the unpacking is still under way when the controller dies.
SNAPSHOTS, FILES = 8, 3000


def _snapshot(path):
    with tarfile.open(path, 'w:gz', compresslevel=1) as tar:
        for index in range(FILES):
            data = b'%d\n' % index
            info = tarfile.TarInfo('var/log/f%05d' % index)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _stat(pid):
    """(state, ppid) of ``pid``, or None when gone."""
    try:
        with open('/proc/%d/stat' % pid) as handle:
            fields = handle.read().rsplit(')', 1)[1].split()
        return fields[0], int(fields[1])
    except (IOError, OSError, IndexError, ValueError):
        return None


def _descendants(pid):
    """The live processes below ``pid``: ansible-core's workers each start a session of their own
    (WorkerProcess._detach in ansible/executor/process/worker.py), so the process group says nothing."""
    children = {}
    for name in os.listdir('/proc'):
        if name.isdigit():
            info = _stat(int(name))
            if info and info[0] not in ('Z', 'X'):
                children.setdefault(info[1], []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            return handle.read()
    except (IOError, OSError):
        return b''


def _alive(pids):
    return [pid for pid in pids if (_stat(pid) or ('X',))[0] not in ('Z', 'X')]


def test_sigkilled_playbook_leaves_no_unpacking_worker(tmp_path):
    snapshots, out = tmp_path / 'snapshots', tmp_path / 'out'
    snapshots.mkdir()
    for index in range(SNAPSHOTS):
        _snapshot(str(snapshots / ('node%d.tar.gz' % index)))
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'offline.yml'),
           '-e', 'gpu_fabric_snapshots=%s' % snapshots, '-e', 'gpu_fabric_output_dir=%s' % out]
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / 'offline' / 'node0' / 'root' / 'var' / 'log'
    workers = []
    try:
        assert processes.wait_for(first.is_dir, 120), 'the unpacking never started'
        workers = _descendants(proc.pid)
        assert workers, 'no worker unpacks'
        proc.kill()
        proc.wait()
        killed = time.time()
        assert processes.wait_for(lambda: not _alive(workers), 10), 'left running: %s' % _alive(workers)
        assert time.time() - killed < 5   # unwatched, it unpacked on for 7.6 s here
        # It stopped where it was: the last snapshot was never reached.
        time.sleep(1)
        assert not (out / 'offline' / ('node%d' % (SNAPSHOTS - 1))).exists()
    finally:
        for pid in _alive(workers):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigkilled_ansible_leaves_no_perftest_stand_in(tmp_path_factory, tmp_path):
    root = node(tmp_path_factory, 'nvidia_h100_8x_ndr')
    port = free_port()
    env = sim_env(root, GF_SIM_PERFTEST_HANG='1', ANSIBLE_ASYNC_DIR=str(tmp_path / 'async'))
    proc = subprocess.Popen(ansible_cmd({'test': 'ib_send_bw', 'role': 'loopback', 'tcp_port': port, 'timeout': 300}),
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    module = []
    try:
        # Both stand-ins run (the server hangs on its client): the module waits on them.
        assert processes.wait_for(lambda: len(leftovers(root)) >= 2, 60), 'the stand-ins never started'
        module = [pid for pid in _descendants(proc.pid) if b'AnsiballZ_perftest_run' in _cmdline(pid)]
        assert module, 'no module process below ansible'
        proc.kill()
        proc.wait()
        killed = time.time()
        assert processes.wait_for(lambda: not leftovers(root) and not _alive(module), 10), \
            'left running: stand-ins %s, module %s' % (leftovers(root), _alive(module))
        assert time.time() - killed < 5
    finally:
        for pid in leftovers(root) + [str(pid) for pid in _alive(module)]:
            os.kill(int(pid), signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ours(marker):
    """Live processes whose environment holds ``marker`` (this test's ANSIBLE_ASYNC_DIR: the playbook, its
    workers, the nodes' async jobs and their perftest stand-ins all inherit it on local-connection nodes)."""
    found = []
    for name in os.listdir('/proc'):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open('/proc/%s/environ' % name, 'rb') as handle:
                environ = b'\0' + handle.read()
        except (IOError, OSError):
            continue
        if marker in environ and (_stat(int(name)) or ('X',))[0] not in ('Z', 'X'):
            found.append(int(name))
    return found


def _leases(directory):
    """{file name: time} of the lease files in ``directory`` (one per node: hpc.gpu_fabric-bench-<run>-<address>.lease)."""
    found = {}
    for name in os.listdir(directory):
        try:
            if name.endswith('.lease'):
                found[name] = os.stat(os.path.join(directory, name)).st_mtime
        except OSError:
            continue
    return found


def test_sigkilled_playbook_stops_every_nodes_benchmark_job(tmp_path):
    """The benchmark's sequences are async jobs, which ansible-core starts to outlive the controller. Killed
    mid-benchmark (a node's servers hang, so each of its steps would wait out its 60 s timeout), every node's job
    stops once the controller's lease runs out (fabric_bench_controller_lease), its stand-ins with it. The three
    nodes share one temporary directory: each keeps a lease file of its own (one file for the run, the followed
    node could lose it to another node, and then neither it nor the nodes asking it ever stopped)."""
    dest = str(tmp_path)
    spec = {'nodes': [{'name': name, 'profile': 'nvidia_h100_8x_ndr'} for name in ('n1', 'n2', 'hang')]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    inventory['all']['children']['gpu_nodes']['hosts']['hang']['gpu_fabric_environment']['GF_SIM_PERFTEST_HANG'] = '1'
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    async_dir = os.path.join(dest, 'async')
    # The nodes' temporary directory (local connection: the modules inherit TMPDIR), where each node keeps its lease
    # file, the three in one directory as containers on one host would have them: this test's own.
    node_tmp = os.path.join(dest, 'node-tmp')
    os.makedirs(node_tmp)
    marker = b'\0ANSIBLE_ASYNC_DIR=' + async_dir.encode() + b'\0'
    # The lease counts from each job's start: it outlasts the moment from the first job's start to the first watch.
    lease = 15
    options = {'fabric_bench_hcas': ['mlx5_0'], 'fabric_bench_memory': ['host'], 'fabric_bench_timeout': 60,
               'fabric_bench_wait_for_server': 15, 'fabric_bench_start_grace': 5, 'fabric_bench_dead_after': 3,
               'fabric_bench_controller_lease': lease, 'fabric_bench_base_port': 26515, 'fabric_bench_beacon_port': 26514,
               'gpu_fabric_collective_enabled': False}
    log = open(os.path.join(dest, 'ansible.log'), 'w')
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'benchmark.yml'),
                             '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes',
                             '-e', 'gpu_fabric_output_dir=' + os.path.join(dest, 'out'), '-e', json.dumps(options)],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, ANSIBLE_ASYNC_DIR=async_dir, ANSIBLE_NOCOLOR='1', TMPDIR=node_tmp))
    try:
        # The controller follows the first node: the jobs run, a hung server holds its step.
        assert processes.wait_for(lambda: b'Follow the benchmark on the first node' in open(log.name, 'rb').read(), 240), \
            open(log.name).read()[-3000:]
        assert processes.wait_for(lambda: any(b'tools_perftest' in _cmdline(pid) for pid in _ours(marker)), 60), 'no stand-in ran'
        # The controller follows the run: every node made its lease file, and the watch renews one of them.
        assert processes.wait_for(lambda: len(_leases(node_tmp)) == 3, 60), _leases(node_tmp)
        made = _leases(node_tmp)
        assert processes.wait_for(lambda: any(when > made[name] + 1 for name, when in _leases(node_tmp).items()), 60), \
            'no lease was renewed'
        followed = [name for name, when in _leases(node_tmp).items() if when > made[name] + 1]
        assert len(followed) == 1, followed
        # Followed a while, so that a node which heard nothing of the renewals would stop before the lease after the kill.
        assert processes.wait_for(lambda: _leases(node_tmp).get(followed[0], 0) > made[followed[0]] + 5, 60), 'no lease was renewed'
        # The nodes still running (a node whose tests did not meet the hung servers may have finished: its file goes with it).
        running = len(_leases(node_tmp))
        assert running >= 2, _leases(node_tmp)
        jobs = [pid for pid in _ours(marker) if b'AnsiballZ_perftest_run' in _cmdline(pid) or b'async_wrapper' in _cmdline(pid)]
        assert jobs, 'no async benchmark job'
        proc.kill()
        proc.wait()
        killed = time.time()
        renewals = []

        def gone():
            renewals.append(_leases(node_tmp).get(followed[0]))
            return not _ours(marker)

        # The lease, the nodes' check and their linger (module_utils/_sequence.py), and this 2-core machine's load;
        # the module's backstop ends any that did not stop by itself 15 s past the lease.
        assert processes.wait_for(gone, lease + 25), \
            'left running: %s' % [(pid, _cmdline(pid)[:120]) for pid in _ours(marker)]
        last_gone = time.time() - killed
        assert last_gone < lease + 25
        # The watch ended with its controller: no renewal came later than a few of its polls after the kill.
        last_renewal = max(when for when in renewals if when is not None) - killed if any(renewals) else None
        assert last_renewal is None or last_renewal < 3, last_renewal
        assert not _leases(node_tmp), 'a lease file was left behind'
        # Each node ended by itself: it stopped (its result says why) or finished its steps (a node whose last test met
        # a stopped peer ends then); the backstop would have failed the job instead. The hung node cannot finish: its
        # every step waits out its timeout. A node stopped not before the lease after the kill, less the 2 s its news of
        # the renewals may lag (module_utils/_sequence.py: LEASE_CHECK_S on the followed node, ANCHOR_EVERY_S on the
        # others): each knew of the renewals, the finished node's among them.
        results = []
        for name in os.listdir(async_dir):
            with open(os.path.join(async_dir, name)) as handle:
                results.append(json.load(handle))
        stopped = [r for r in results if 'the controller stopped following the benchmark' in r.get('stopped', '')]
        assert len(results) == 3 and 1 <= len(stopped) <= running, [(r.get('stopped'), r.get('msg')) for r in results]
        assert all(r.get('failed') is False and len(r['steps']) == 3 for r in results), [r.get('msg') for r in results]
        assert min(r['elapsed_s'] for r in stopped) > killed - max(made.values()) + lease - 3, \
            ([r['elapsed_s'] for r in stopped], killed - max(made.values()))
        print('killed: every process of ours gone after %.1f s (lease %d s); last lease renewal %s s after the kill'
              % (last_gone, lease, 'n/a' if last_renewal is None else '%.1f' % last_renewal))
    finally:
        log.close()
        for pid in _ours(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
