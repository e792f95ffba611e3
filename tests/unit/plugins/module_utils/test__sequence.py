# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The sequence engine: beacons, and whole sequences of two simulated nodes (the perftest
stand-ins of tests/sim, really talking over TCP between 127.0.1.x addresses)."""

from __future__ import annotations

import json
import signal
import multiprocessing
import os
import socket
import subprocess
import sys
import time
import types

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process, _sequence
from tests.processes import wait_for as processes_wait

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
BIN = os.path.join(REPO, 'tests', 'sim', 'bin', 'ib_write_bw')


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def test_beacon_answers_with_the_step_and_only_for_its_run():
    port = _free_port()
    beacon = _sequence.Beacon('127.0.0.1', port, 'run-a')
    try:
        beacon.step = 7
        # The beacon is served from the engine's loop; here, between connect and read.
        sock = socket.create_connection(('127.0.0.1', port), 1)
        beacon.serve()
        assert sock.recv(100) == b'gf-fabric-bench run-a 7\n'
        sock.close()
        assert _sequence.probe('127.0.0.1', port, 'run-a', timeout=0.05) is None   # not served: no answer in time
    finally:
        beacon.close()
    assert _sequence.probe('127.0.0.1', port, 'run-a', timeout=0.2) is None       # closed: refused


def test_beacon_on_a_busy_port_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        try:
            _sequence.Beacon('127.0.0.1', port, 'x')
        except _sequence.BeaconError as exc:
            assert 'cannot listen on 127.0.0.1:%d for the benchmark beacon' % port in str(exc)
        else:
            raise AssertionError('a busy beacon port must fail')


def _node(address, root, steps, options, queue):
    env = _process.c_locale_env(dict(os.environ, GF_SIM_ROOT=root, GF_SIM_ADDR=address, GF_SIM_PYTHON=sys.executable,
                                     GF_SIM_PERFTEST_MAX_S='0.2'))

    def build(entry):
        argv = [BIN, '-d', entry['device'], '-p', str(entry['tcp_port']), '-s', '65536']
        return argv + ([entry['peer']] if entry['side'] == 'client' else [])

    options = dict(options, address=address)
    try:
        queue.put(json.dumps(_sequence.run_sequence(steps, build, options, env=env)))
    except Exception as exc:  # report it to the test rather than hang it
        queue.put(json.dumps({'error': repr(exc)}))


def _start(nodes, options):
    ctx = multiprocessing.get_context('fork')
    queues, procs = {}, {}
    for name, (address, root, steps) in nodes.items():
        queues[name] = ctx.Queue()
        procs[name] = ctx.Process(target=_node, args=(address, root, steps, options, queues[name]))
        procs[name].start()
    return queues, procs


def _collect(queues, procs):
    results = dict((name, json.loads(queue.get(timeout=60))) for name, queue in queues.items())
    for proc in procs.values():
        proc.join(10)
    return results


def _run(nodes, options):
    return _collect(*_start(nodes, options))


def _test(side, peer, port, **extra):
    return dict({'side': side, 'peer': peer, 'device': 'mlx5_0', 'tcp_port': port}, **extra)


def _options(**extra):
    return dict({'beacon_port': _free_port(), 'run_id': 'r%d' % os.getpid(), 'timeout': 20, 'wait_for_server': 5,
                 'dead_after': 2, 'start_grace': 10}, **extra)


def test_two_nodes_take_turns_and_meet_every_step(sim_root):
    root, _ctx = sim_root('homelab_cx4')
    port = _free_port()
    a, b = '127.0.1.1', '127.0.1.2'
    steps_a = [{'tests': [_test('server', b, port, pair_id='a<>b')]}, {'tests': []},
               {'tests': [_test('client', b, port, pair_id='a<>b')]}]
    steps_b = [{'tests': [_test('client', a, port, pair_id='a<>b')]}, {'tests': []},
               {'tests': [_test('server', a, port, pair_id='a<>b')]}]
    results = _run({'a': (a, root, steps_a), 'b': (b, root, steps_b)}, _options())
    for name in ('a', 'b'):
        assert 'error' not in results[name], results[name]
        assert [len(step['tests']) for step in results[name]['steps']] == [1, 0, 1]
        for step in results[name]['steps']:
            for test in step['tests']:
                assert test['status'] == 'ok', test
                assert test['pair_id'] == 'a<>b' and 'peer' not in test
    clients = [results['b']['steps'][0]['tests'][0], results['a']['steps'][2]['tests'][0]]
    # The client starts once its server listens: one start, a result table, no retries.
    assert all(c['attempts'] == 1 and c['summary']['bw_avg_gbps'] > 0 for c in clients), clients
    # An ok test comes back without perftest's banner, command and output (nobody reads them; a mesh's
    # million tests carry them to the controller); its result rows and warnings stay.
    assert all('cmd' not in c and 'settings' not in c and 'stdout' not in c and c['results'] for c in clients)


def _done_test(status, keep_output):
    report = {'status': status, 'failure': None if status == 'ok' else {'kind': 'timeout', 'message': 'killed'},
              'parsed': {'results': [{'bytes': 8, 'bw_avg_gbps': 390.0}], 'settings': {'mtu_bytes': 4096},
                         'tool_warnings': ['Requested mtu is higher'], 'units': 'Gb/sec'},
              'cmd': ['ib_write_bw', '10.0.0.2'], 'rc': 0 if status == 'ok' else -9, 'stdout': 'table', 'stderr': ''}
    test = types.SimpleNamespace(entry={'side': 'client', 'peer': '10.0.0.2', 'rail': 0}, report=report, attempts=1,
                                 launched=types.SimpleNamespace(ended=12.5), first_launch=10.0)
    return _sequence._result(test, keep_output)


def test_banner_command_and_output_come_back_for_a_failed_test_or_when_asked():
    ok = _done_test('ok', False)
    assert 'settings' not in ok and 'cmd' not in ok and 'stdout' not in ok and 'peer' not in ok
    assert (ok['status'], ok['summary']['bw_avg_gbps'], ok['tool_warnings'], ok['elapsed_s']) == (
        'ok', 390.0, ['Requested mtu is higher'], 2.5)
    for entry in (_done_test('failed', False), _done_test('ok', True)):
        assert entry['settings'] == {'mtu_bytes': 4096} and entry['cmd'][-1] == '10.0.0.2' and entry['stdout'] == 'table'


def test_a_lost_peer_fails_its_tests_fast_and_the_node_goes_on(sim_root):
    root, _ctx = sim_root('homelab_cx4')
    port = _free_port()
    a, b = '127.0.1.3', '127.0.1.4'
    # b runs one step and leaves; a still expects it as the client of step 2 and as the
    # server of step 3, and has a test with a node that never comes (127.0.1.5) in step 4.
    steps_a = [{'tests': [_test('server', b, port)]}, {'tests': [_test('server', b, port)]},
               {'tests': [_test('client', b, port)]}, {'tests': [_test('server', '127.0.1.5', port)]}]
    steps_b = [{'tests': [_test('client', a, port)]}]
    start = time.time()
    results = _run({'a': (a, root, steps_a), 'b': (b, root, steps_b)}, _options(start_grace=3))
    elapsed = time.time() - start
    steps = results['a']['steps']
    assert steps[0]['tests'][0]['status'] == 'ok'
    kinds = [step['tests'][0]['failure']['kind'] for step in steps[1:]]
    # b is finished (its beacon says so while it lingers) or gone (dead_after 2 s).
    assert kinds[0] in ('peer_moved_on', 'peer_lost') and kinds[1] in ('peer_moved_on', 'peer_lost'), kinds
    assert kinds[2] == 'peer_lost' and 'no beacon of this run answered' in steps[3]['tests'][0]['failure']['message']
    assert elapsed < 20, elapsed   # well under the 20 s test timeout: lost peers are not waited for
    # No perftest process of either node remains.
    time.sleep(0.2)
    left = subprocess.run(['pgrep', '-f', 'tools_perftest.py ib_write_bw -d mlx5_0 -p %d' % port], capture_output=True,
                          text=True, check=False)
    assert left.stdout == ''


def test_a_probe_keeps_serving_its_own_beacon_while_it_waits():
    """Two single-threaded nodes probing each other at once both get their answer."""
    port_a, port_b = _free_port(), _free_port()
    a, b = _sequence.Beacon('127.0.0.1', port_a, 'r'), _sequence.Beacon('127.0.0.1', port_b, 'r')
    a.step, b.step = 3, 4
    try:
        # a asks b while b's process is busy asking a; b only answers between its own waits.
        ctx = multiprocessing.get_context('fork')
        queue = ctx.Queue()

        def b_side():
            queue.put(_sequence.probe('127.0.0.1', port_a, 'r', timeout=2.0, serve=b.serve))
            end = time.time() + 2.0   # and stays up, as a node between its probes does
            while time.time() < end:
                b.serve()
                time.sleep(0.01)

        proc = ctx.Process(target=b_side)
        proc.start()
        b.close()   # only the child answers for b
        assert _sequence.probe('127.0.0.1', port_b, 'r', timeout=2.0, serve=a.serve) == 4
        # and a stays up too until b has its answer (b may have started its probe late).
        end = time.time() + 5.0
        while queue.empty() and time.time() < end:
            a.serve()
            time.sleep(0.01)
        assert queue.get(timeout=1) == 3
        proc.join(5)
    finally:
        a.close()
        b.close()


def test_watch_follows_a_node_step_by_step_and_returns_once_its_job_can_end(sim_root):
    root, _ctx = sim_root('homelab_cx4')
    port = _free_port()
    a, b = '127.0.1.6', '127.0.1.7'
    steps_a = [{'tests': [_test('server', b, port)]}, {'tests': [_test('client', b, port)]}]
    steps_b = [{'tests': [_test('client', a, port)]}, {'tests': [_test('server', a, port)]}]
    options = _options()
    started = _start({'a': (a, root, steps_a), 'b': (b, root, steps_b)}, options)
    try:
        first = _sequence.watch(a, options['beacon_port'], options['run_id'], 1, timeout=30, start_grace=10)
        second = _sequence.watch(a, options['beacon_port'], options['run_id'], 2, timeout=30, start_grace=10)
        closed = _sequence.probe(a, options['beacon_port'], options['run_id'], timeout=0.2)
    finally:
        results = _collect(*started)
    assert first['gone'] is False and first['timed_out'] is False
    # Past step 1: at step 2, or already finished when step 2 was quick.
    assert first['step'] == 2 or first['finished'], first
    assert second == dict(second, step=None, finished=True, gone=False, timed_out=False), second
    # watch returned only once the finished node's beacon had closed: its job is at its end.
    assert closed is None
    assert all(t['status'] == 'ok' for step in results['a']['steps'] for t in step['tests']), results['a']


def test_watch_of_a_node_that_never_comes_says_gone_after_the_grace():
    port = _free_port()
    start = time.time()
    seen = _sequence.watch('127.0.1.8', port, 'nobody', 1, timeout=30, start_grace=1)
    assert seen['gone'] is True and seen['finished'] is False and seen['step'] is None
    assert 0.9 < time.time() - start < 5


def test_a_busy_peer_is_waited_for_a_closed_one_is_lost(monkeypatch):
    # A beacon that accepts but answers late is a node busy starting its tests, not a lost
    # one (seen on a loaded 2-core host); a closed beacon refuses: that node is gone.
    monkeypatch.setattr(_sequence, 'STUCK_AFTER', 4)
    port = _free_port()
    beacon = _sequence.Beacon('127.0.0.1', port, 'run-b')
    peer = _sequence.Peer('127.0.0.1', port, 'run-b', time.time(), dead_after=0.5, start_grace=5)
    try:
        beacon.step = 3
        # The first answer (served between the probe's connect and its read).
        peer.poll(time.time(), every=0)
        assert peer.step is None     # not served yet: no answer in time
        sock = socket.create_connection(('127.0.0.1', port), 1)
        sock.close()
        started = time.time()
        while peer.step is None and time.time() - started < 5:
            assert peer.lost(time.time()) is None
            # serve() while the probe waits: the probe's own serve hook stands for it here.
            peer.serve = beacon.serve
            peer.poll(time.time(), every=0)
            peer.serve = None
        assert peer.step == 3
        # Now silent but holding its socket: busy, well past dead_after, not lost ...
        deadline = time.time() + 1.5
        while time.time() < deadline:
            peer.poll(time.time(), every=0)
            assert peer.lost(time.time()) is None
        # ... until it has not answered for STUCK_AFTER x dead_after.
        while time.time() - peer.seen < 2.1:
            peer.poll(time.time(), every=0)
        assert 'has not answered for 2 s (the node is stuck)' in peer.lost(time.time())
    finally:
        beacon.close()
    peer.seen = time.time()   # answered just now, then its beacon closes: refused from here on
    peer.poll(time.time() + 1, every=0)
    time.sleep(0.6)
    assert 'stopped answering' in peer.lost(time.time())


def test_a_step_whose_counters_did_not_change_sends_only_the_time_of_the_read():
    def read(at, symbol_error):
        return {'devices': [{'name': 'mlx5_0', 'ports': [{'port': 1, 'counters_read_at': at, 'counters': {'symbol_error': symbol_error},
                                                          'hw_counters': {}}]}]}
    reads = iter([read(1.0, 0), read(2.0, 0), read(3.0, 4), read(4.0, 4), read(5.0, 0)])
    done = _sequence.run_sequence([{'tests': []}] * 4, lambda entry: [BIN], dict(_options(dead_after=0.1), address='127.0.0.1'),
                                  counters=lambda: next(reads))
    assert done['counters_start'] == read(1.0, 0)
    steps = done['steps']
    # Unchanged since the last read sent: the time only; changed (up, or down after a reset): the read.
    assert [('counters' in s, s.get('counters_same_at')) for s in steps] == [(False, 2.0), (True, None), (False, 4.0), (True, None)]
    assert steps[1]['counters'] == read(3.0, 4) and steps[3]['counters'] == read(5.0, 0)


def _steps(peer, port, count, first):
    other = 'client' if first == 'server' else 'server'
    return [{'tests': [_test(first if i % 2 else other, peer, port)]} for i in range(count)]


def _stopped_kinds(result):
    return [t['failure']['kind'] for step in result['steps'] for t in step['tests'] if t['failure']]


def test_a_controller_gone_stops_the_followed_node_and_through_it_every_node(sim_root):
    """A sequence is an async job that outlives a killed ansible-playbook. The followed node (a) holds the
    controller's lease, renewed by perftest_watch in a's own lease file; b (its anchor is a) learns of the
    renewals from a's beacon. Both run in one temporary directory (as the simulated cluster's local nodes
    do): each has a file of its own, so the renewals reach a whichever node starts first. Once the
    controller is gone, neither runs its remaining tests, each fails them as stopped."""
    root, _ctx = sim_root('homelab_cx4')
    port = _free_port()
    a, b = '127.0.1.6', '127.0.1.7'
    options = _options(lease_s=3)
    lease_a, lease_b = _sequence.lease_path(options['run_id'], a), _sequence.lease_path(options['run_id'], b)
    assert lease_a != lease_b and not os.path.exists(lease_a)
    ctx = multiprocessing.get_context('fork')
    queues = {'a': ctx.Queue(), 'b': ctx.Queue()}
    # b starts first: it must not take a's lease.
    procs = {'b': ctx.Process(target=_node, args=(b, root, _steps(a, port, 60, 'client'), dict(options, anchors=[a, b]), queues['b']))}
    procs['b'].start()
    assert processes_wait(lambda: os.path.exists(lease_b), 10), 'b made no lease file'
    procs['a'] = ctx.Process(target=_node, args=(a, root, _steps(b, port, 60, 'server'), dict(options, anchors=[a, b]), queues['a']))
    procs['a'].start()
    assert processes_wait(lambda: os.path.exists(lease_a), 10), 'the followed node made no lease file'
    start = time.time()
    # The controller follows a for 6 s (twice the lease: the renewals keep both running), then is killed.
    while time.time() - start < 6.0:
        assert _sequence.renew_lease(lease_a)
        time.sleep(0.05)
    gone = time.time()
    results = _collect(queues, procs)
    stopped = time.time() - gone
    for name in ('a', 'b'):
        assert 'error' not in results[name], results[name]
        kinds = _stopped_kinds(results[name])
        assert len(results[name]['steps']) == 60 and kinds.count('stopped') > 10, (name, kinds)
        assert 'the controller stopped following the benchmark' in results[name]['stopped']
        # Tests ran while the controller followed (the lease counts from the start: 3 s, passed twice).
        assert sum(1 for step in results[name]['steps'] for t in step['tests'] if t['status'] == 'ok') > 2, name
    # a stops on its own lease, or (a loaded machine delays b's probes of a, and a 3 s lease is short) on b's word
    # that b's lease ran out: either way for the lease, never for another cause.
    assert 'no renewal of its lease' in results['a']['stopped'] or 'stopped the run: its lease ran out' in results['a']['stopped']
    # Within the lease, a check, the probes and the stopped linger; not after 60 steps (each test takes up to 0.2 s).
    assert stopped < 3 + _sequence.LEASE_CHECK_S + _sequence.STOPPED_LINGER_S + 3, stopped
    # The lease files go with the run, and a watch after the end leaves none behind.
    assert not os.path.exists(lease_a) and not os.path.exists(lease_b)
    assert not _sequence.renew_lease(lease_a) and not os.path.exists(lease_a)


def test_a_hung_anchor_keeps_no_node_running(sim_root):
    """The anchor stops answering (SIGSTOP: its beacon still accepts, its loop never checks): b has no news of
    the lease and stops by itself once the lease is out, its tests with a failing as stopped or peer_lost."""
    root, _ctx = sim_root('homelab_cx4')
    port = _free_port()
    a, b = '127.0.1.8', '127.0.1.9'
    options = _options(lease_s=3, dead_after=30, start_grace=30)
    lease_a = _sequence.lease_path(options['run_id'], a)
    ctx = multiprocessing.get_context('fork')
    queues = {'a': ctx.Queue(), 'b': ctx.Queue()}
    procs = {'a': ctx.Process(target=_node, args=(a, root, _steps(b, port, 200, 'server'), dict(options, anchors=[a]), queues['a'])),
             'b': ctx.Process(target=_node, args=(b, root, _steps(a, port, 200, 'client'), dict(options, anchors=[a]), queues['b']))}
    for proc in procs.values():
        proc.start()
    try:
        assert processes_wait(lambda: os.path.exists(lease_a), 10)
        start = time.time()
        while time.time() - start < 2.0:
            assert _sequence.renew_lease(lease_a)
            time.sleep(0.05)
        os.kill(procs['a'].pid, signal.SIGSTOP)      # the anchor hangs while the controller still follows it
        hung = time.time()
        while time.time() - hung < 1.0:
            _sequence.renew_lease(lease_a)
            time.sleep(0.05)
        result = json.loads(queues['b'].get(timeout=30))
        stopped = time.time() - hung
        assert 'error' not in result, result
        assert 'no renewal of its lease' in result['stopped'], result['stopped']
        assert len(result['steps']) == 200 and _stopped_kinds(result).count('stopped') > 100
        # The last news came before the hang: out within the lease, a check and the linger.
        assert stopped < 3 + _sequence.LEASE_CHECK_S + _sequence.STOPPED_LINGER_S + 3, stopped
    finally:
        os.kill(procs['a'].pid, signal.SIGCONT)
        procs['b'].join(10)
    # a, let go, finds its lease out too (no renewal since) and stops.
    result = json.loads(queues['a'].get(timeout=30))
    assert 'no renewal of its lease' in result['stopped']
    procs['a'].join(10)


class _Quiet(object):
    renewed = None

    def serve(self):
        return None


def test_the_lease_counts_from_the_start_and_the_backstop_ends_a_stuck_loop(tmp_path, monkeypatch):
    """No renewal ever (the controller killed before it followed the run): the run stops all the same; and
    should the loop never check, SIGALRM ends the module LEASE_BACKSTOP_S past the lease's end."""
    monkeypatch.setattr(_sequence.tempfile, 'gettempdir', lambda: str(tmp_path))
    monkeypatch.setattr(_sequence, 'LEASE_BACKSTOP_S', 0.5)
    started = time.time()
    beacon = _Quiet()
    stop = _sequence._Stop({'lease_s': 1, 'run_id': 'run-1', 'address': '10.0.0.1', 'beacon_port': 1,
                            'anchors': ['10.0.0.1']}, started, beacon)
    try:
        assert stop.lease == str(tmp_path / 'hpc.gpu_fabric-bench-run-1-10.0.0.1.lease') and os.path.isfile(stop.lease)
        assert stop.anchors == [] and beacon.renewed == started      # itself is no anchor to ask
        assert stop.check(started + 0.5) is None
        assert 'no renewal of its lease for 2 s' in stop.check(started + 2.1)
        stop.arm()
        caught = None
        try:
            time.sleep(5)
        except _process.Terminated as exc:
            caught = exc
        assert caught is not None and 'the backstop' in str(caught) and time.time() - started < 4
    finally:
        stop.close()
    assert not os.path.exists(str(tmp_path / 'hpc.gpu_fabric-bench-run-1-10.0.0.1.lease'))
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_lease_files_are_the_nodes_own_and_never_taken_over(tmp_path, monkeypatch):
    monkeypatch.setattr(_sequence.tempfile, 'gettempdir', lambda: str(tmp_path))
    path = _sequence.lease_path('run-1', '10.0.0.1')
    assert path.startswith(str(tmp_path)) and path != _sequence.lease_path('run-1', '10.0.0.2')
    for run_id, address in (('../x', 'a'), ('a/b', 'a'), ('r', '../etc'), ('r', 'a/b'), ('r', ''), ('', 'a'), ('r', 'x' * 200)):
        assert _sequence.lease_path(run_id, address) is None, (run_id, address)
    assert _sequence.renew_lease(path, create=True) and time.time() - _sequence.lease_renewed(path) < 5
    assert not _sequence.renew_lease(path, create=True)          # another run's file is never taken over
    os.utime(path, (1000, 1000))
    assert _sequence.renew_lease(path) and time.time() - _sequence.lease_renewed(path) < 5
    os.unlink(path)
    os.symlink(str(tmp_path / 'elsewhere'), path)                 # never written through a symlink
    assert not _sequence.renew_lease(path) and not _sequence.renew_lease(path, create=True)
    assert not (tmp_path / 'elsewhere').exists() and _sequence.lease_renewed(path) is None


def test_the_beacon_says_when_the_lease_was_renewed_and_a_bad_answer_says_nothing():
    port = _free_port()
    beacon = _sequence.Beacon('127.0.0.1', port, 'run-a')
    try:
        beacon.step = 3
        beacon.renewed = time.time() - 4.2
        sock = socket.create_connection(('127.0.0.1', port), 1)
        beacon.serve()
        line = sock.recv(100)
        sock.close()
        assert line.startswith(b'gf-fabric-bench run-a 3 4.') and line.endswith(b'\n')
    finally:
        beacon.close()
    for answer, expected in ((b'gf-fabric-bench r 3 1.5\n', (3, True, 1.5)), (b'gf-fabric-bench r 3\n', (3, True, None)),
                             (b'gf-fabric-bench r 3 nan\n', (3, True, None)), (b'gf-fabric-bench r 3 -1\n', (3, True, None)),
                             (b'gf-fabric-bench r 3 x\n', (None, False, None)), (b'gf-fabric-bench r 3 1 2\n', (None, False, None))):
        assert _answer(answer) == expected, answer


def _answer(answer):
    with socket.socket() as server:
        server.bind(('127.0.0.1', 0))
        server.listen(1)
        port = server.getsockname()[1]
        pid = os.fork()
        if pid == 0:
            try:
                conn = server.accept()[0]
                conn.sendall(answer)
                conn.close()
            finally:
                os._exit(0)
        try:
            return _sequence.probe_lease('127.0.0.1', port, 'r', timeout=2)
        finally:
            os.waitpid(pid, 0)


def _node_window(address, root, steps, options, queue):
    """_node with the window's reads: the counters (and their window) around each step, the links sampled meanwhile."""
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ib, _window
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
    env = _process.c_locale_env(dict(os.environ, GF_SIM_ROOT=root, GF_SIM_ADDR=address, GF_SIM_PYTHON=sys.executable,
                                     GF_SIM_PERFTEST_MAX_S='0.2'))

    def counters():
        sysroot = SysRoot(root)
        devices = _ib.read_ib(sysroot)
        read = _ib.error_counters(devices)
        read['window'] = _window.read_window(sysroot, devices, (), None)
        return read

    def build(entry):
        argv = [BIN, '-d', entry['device'], '-p', str(entry['tcp_port']), '-s', '65536']
        return argv + ([entry['peer']] if entry['side'] == 'client' else [])

    def sampler():
        return _window.sample_links(SysRoot(root), ['0000:03:00.0'])
    try:
        queue.put(json.dumps(_sequence.run_sequence(steps, build, dict(options, address=address), counters, env=env, sampler=sampler)))
    except Exception as exc:  # report it to the test rather than hang it
        queue.put(json.dumps({'error': repr(exc)}))


def test_a_step_reads_the_window_and_samples_the_links(tmp_path):
    """The stand-in perftest moves the AER counters of a node with PCIe replays (tests/sim/tools_window.py); the read
    after the step holds them, and the links sampled while the step ran come back with the step."""
    import copy as _copy
    from tests.sim import faults, render
    profile = _copy.deepcopy(render.load_profile('homelab_cx4'))
    target = faults.apply_window(profile, 'pcie_replays', 'mlx5_0')
    root = str(tmp_path / 'node')
    render.render(profile, root)
    port = _free_port()
    a, b = '127.0.1.1', '127.0.1.2'
    ctx = multiprocessing.get_context('fork')
    queues, procs = {}, {}
    options = _options()
    for name, address, steps, target_func in (('a', a, [{'tests': [_test('server', b, port)]}], _node_window),
                                              ('b', b, [{'tests': [_test('client', a, port)]}], _node)):
        queues[name] = ctx.Queue()
        procs[name] = ctx.Process(target=target_func, args=(address, root, steps, options, queues[name]))
        procs[name].start()
    results = _collect(queues, procs)
    assert 'error' not in results['a'] and 'error' not in results['b'], results
    start, step = results['a']['counters_start']['window'], results['a']['steps'][0]
    bdf = target['bdf']
    assert start['aer'][bdf]['TOTAL_ERR_COR'] == 0 and start['paths']['mlx5_0'][-1] == bdf
    assert step['counters']['window']['aer'][bdf]['BadTLP'] >= 2600
    assert step['links'] == {bdf: [[8.0, 16]]} and step['link_samples'] >= 1
