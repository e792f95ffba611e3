# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A node's whole share of a pairwise benchmark in one process: every step (round) one
after the other, every rail of a step at once, pairs kept in step through beacons.

Why: an Ansible task per round costs seconds of controller round trips per round (launch,
poll, counters, records), ten times the test itself on a simulated cluster. Here one
async task per node runs all its rounds and the pairs synchronise among themselves.

How the pairs meet without a controller:
- each node serves a *beacon* on its out-of-band address: a TCP port that answers every
  connection with one line ``gf-fabric-bench <run id> <step> [<seconds since the controller's
  lease was renewed>]`` and closes (the lease: below, at STOPPED);
- a client starts its perftest only when its server's beacon says the same step (the
  server's perftest processes of that step are started before the beacon moves to it),
  and starts it again while the connection is refused (perftest tries once);
- a server whose client's beacon is behind waits for it (the timeout counts from when the
  client reached the step), so one slow pair delays only the pairs that meet it later and
  fails none of them;
- a peer whose beacon stops answering for ``dead_after`` seconds (never seen for
  ``start_grace``) is lost: its tests fail at once with kind C(peer_lost), and the node
  goes on. A peer whose beacon is past the step gave up on this test: C(peer_moved_on).
The run id keeps a beacon of another run (or another service on the port) from counting.

Everything runs in one thread (processes are started from the main thread only: fork
with threads is unsafe). The loop sleeps in select() on the beacon's socket and on a
SIGCHLD wake-up pipe, at most TICK_S: a probe is answered and a perftest's exit seen the
moment they happen, not at the next tick (each tick of delay is paid in every round). Each
perftest is a ``_process.Launched`` (own session, killed with the module) and is reaped
whatever happens.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import stat
import tempfile
import time

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _perftest, _process

BEACON_TAG = 'gf-fabric-bench'
TICK_S = 0.01
# How often a step's new servers are looked for among the listening sockets (/proc/net/tcp).
LISTEN_POLL_S = 0.005
# A test waiting for its peer asks its beacon every PROBE_EVERY_S: half of it is, on
# average, added to every round (0.1 s cost 15 rounds x 0.05 s on 16 nodes), and a probe is
# a local-network connect answered at once. A running test only checks that the peer is
# alive, every ALIVE_EVERY_S (each probe wakes the peer's process).
PROBE_EVERY_S = 0.01
ALIVE_EVERY_S = 1.0
# A server whose client has moved past the step gets this long to print and exit
# (the client ends first: the server writes its last line after the client's).
MOVED_ON_GRACE_S = 5.0
# How long a step waits for its servers to listen before telling its clients to come anyway
# (perftest binds and listens within milliseconds of its start; a rdma_cm listener is no TCP socket).
READY_GRACE_S = 3.0
# A peer whose beacon accepts connections but does not answer is busy, not gone - for up
# to this many times dead_after (a process that holds its socket but never serves is stuck).
STUCK_AFTER = 6
# What the beacon says once every step is done (past any step a peer may be waiting in).
FINISHED = 999999999
# How long a finished node keeps its beacon up: a peer still finishing its last test sees
# it moved on rather than silent. Short, because the node's async job (and the play's wait
# for it) ends only after it.
LINGER_S = 0.2
# The controller's lease. A sequence is an async job, which ansible-core starts to outlive its
# ansible-playbook; killed, that controller left every node's sequence running to its time budget
# (16 min for the demo's). So the run holds a lease that only a live controller renews:
# - every node makes a lease file of its own (lease_path: run id and address, so that nodes sharing a
#   temporary directory - the simulated cluster's local nodes, containers on one host - never share one)
#   and counts the lease from its start: a controller killed before it ever followed the run stops it too;
# - perftest_watch, following the run on one node, renews that node's file at every poll (WATCH_EVERY_S);
# - each node's beacon says when, to its knowledge, the lease was last renewed (seconds ago, so that the
#   nodes' clocks need not agree), and every node asks the ``anchors`` (the first nodes of the play,
#   among which is the one the controller follows) every ANCHOR_EVERY_S: it knows the newest renewal
#   among its own file and their answers, and stops once that is older than the lease time, whatever
#   state the anchors are in - one that hangs or is gone gives no news, and no news runs the lease out;
# - a node that stopped answers STOPPED on its beacon for STOPPED_LINGER_S, and a node told STOPPED
#   by an anchor stops at once;
# - a backstop: SIGALRM, re-armed at every check for LEASE_BACKSTOP_S past the lease's end, ends the
#   module (Guard's Terminated, then every perftest is reaped) should its loop not get to check.
# The lease time (perftest_run's controller_lease; the role's default: start_grace + a step's worst case
# + 60 s) is far beyond the second or two between two watch tasks.
STOPPED = 999999998
ANCHOR_EVERY_S = 1.0
STOPPED_LINGER_S = 3.0 * ANCHOR_EVERY_S
LEASE_CHECK_S = ANCHOR_EVERY_S
LEASE_BACKSTOP_S = 15.0
# An anchor's answer comes at once from a loop sleeping in select(); one that hangs holds this node's loop
# for this long per check (its own beacon served meanwhile), a busy one gives its news at a later check.
ANCHOR_TIMEOUT_S = 0.25
_RUN_ID_RE = re.compile(r'^[A-Za-z0-9_.-]{1,64}$')
_ADDRESS_RE = re.compile(r'^[A-Za-z0-9_.:-]{1,128}$')


def lease_path(run_id, address):
    """The lease file of run ``run_id`` on the node at ``address`` in its temporary directory, or None
    for a run id or address that cannot name a file (the node then has no lease file; it still stops
    when its anchors give no news)."""
    run_id, address = str(run_id), str(address)
    if not _RUN_ID_RE.match(run_id) or not _ADDRESS_RE.match(address) or '..' in run_id + '-' + address:
        return None
    return os.path.join(tempfile.gettempdir(), 'hpc.gpu_fabric-bench-%s-%s.lease' % (run_id, address))


def renew_lease(path, create=False):
    """Set ``path``'s time to now - or, with ``create``, make it (mode 0600, a new file only, its time
    the start of the lease). Never through a symlink, never on what is not a regular file; the sequence
    makes the file and removes it, so a watch after the end finds none and leaves none. False when it
    could not be written."""
    flags = os.O_WRONLY | getattr(os, 'O_NOFOLLOW', 0) | ((os.O_CREAT | os.O_EXCL) if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        os.utime(fd, None)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def lease_renewed(path):
    """When the lease at ``path`` was last renewed (its file's time), None when there is no such file."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_mtime if stat.S_ISREG(info.st_mode) else None


def drop_lease(path):
    try:
        if path and stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


# watch() polls the followed node this often (a module run per step on the controller's
# side, so the poll is cheap; the play learns of the end within it).
WATCH_EVERY_S = 0.05


class BeaconError(Exception):
    pass


class Beacon(object):
    """Non-blocking listener answering with this node's current step."""

    def __init__(self, address, port, run_id):
        self.run_id = run_id
        self.step = 0
        # When the controller's lease was last renewed, to this node's knowledge (None: no lease): said
        # as seconds ago after the step, so that the nodes asking need not share this node's clock.
        self.renewed = None
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((address, port))
            self.sock.listen(128)
        except OSError as exc:
            self.sock.close()
            raise BeaconError('cannot listen on %s:%d for the benchmark beacon: %s' % (address, port, exc.strerror or exc))
        self.sock.setblocking(False)

    def serve(self):
        while True:
            try:
                conn, _peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                conn.settimeout(0.2)
                line = '%s %s %d' % (BEACON_TAG, self.run_id, self.step)
                if self.renewed is not None:
                    line += ' %.1f' % max(0.0, time.time() - self.renewed)
                conn.sendall((line + '\n').encode('ascii'))
            except OSError:
                pass
            finally:
                conn.close()

    def wait(self, timeout, wakeup=None):
        """Sleep until a peer connects, a child exits (``wakeup``) or ``timeout`` passes;
        then answer whoever is waiting."""
        fds = [self.sock] + ([wakeup.fd] if wakeup is not None else [])
        try:
            ready = select.select(fds, [], [], timeout)[0]
        except (OSError, ValueError):
            time.sleep(timeout)
            ready = []
        if wakeup is not None and wakeup.fd in ready:
            wakeup.drain()
        self.serve()

    def close(self):
        self.sock.close()


class ChildWakeup(object):
    """A file descriptor that becomes readable when a child process exits (SIGCHLD through
    signal.set_wakeup_fd), so that the loop's select() returns at once. Main thread only;
    where it cannot be set up (not the main thread), ``fd`` is None and ticks do the work."""

    def __init__(self):
        self.fd = None
        self._pair = None
        self._saved = None
        try:
            pair = socket.socketpair()
            for end in pair:
                end.setblocking(False)
            old_fd = signal.set_wakeup_fd(pair[1].fileno(), warn_on_full_buffer=False)
            old_handler = signal.signal(signal.SIGCHLD, _on_child)
        except (ValueError, OSError):
            return
        self._pair, self._saved, self.fd = pair, (old_fd, old_handler), pair[0].fileno()

    def drain(self):
        try:
            while self._pair[0].recv(512):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    def close(self):
        if self._pair is None:
            return
        old_fd, old_handler = self._saved
        signal.signal(signal.SIGCHLD, old_handler if old_handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(old_fd)
        for end in self._pair:
            end.close()
        self._pair, self.fd = None, None


def _on_child(signum, frame):
    # Nothing to do: the signal's byte on the wake-up fd is what select() sees.
    return None


def probe_state(address, port, run_id, timeout=0.5, serve=None):
    """probe_lease() without the lease."""
    return probe_lease(address, port, run_id, timeout, serve)[:2]


def probe_lease(address, port, run_id, timeout=0.5, serve=None):
    """(step, reached, renewed_ago): the step a peer's beacon reports (None when no beacon of this run
    answered), and whether its beacon was reached - the connection accepted and either
    this run's answer or no answer in time (a node too busy to answer within ``timeout``:
    its process still holds the socket, a dead one's socket is closed and refuses); and how many
    seconds ago the controller's lease was last renewed to the peer's knowledge (None: not said).

    ``serve`` (this node's Beacon.serve) runs while the answer is awaited: the peer may be
    probing this node at the same moment, and two single-threaded nodes that wait for each
    other's answer without serving their own would both time out, again and again.
    """
    try:
        sock = socket.create_connection((address, port), timeout)
    except (OSError, ValueError):
        return None, False, None
    data = b''
    deadline = time.time() + timeout
    try:
        # Short waits: the answer comes at once from a peer sleeping in select(); between
        # them this node's own beacon is served.
        sock.settimeout(TICK_S / 2)
        while b'\n' not in data and len(data) < 256 and time.time() < deadline:
            try:
                chunk = sock.recv(256)
            except socket.timeout:
                if serve is not None:
                    serve()
                continue
            if not chunk:
                break
            data += chunk
    except OSError:
        return None, False, None
    finally:
        sock.close()
    if not data:
        return None, time.time() >= deadline, None
    parts = data.decode('ascii', 'replace').split()
    if len(parts) in (3, 4) and parts[0] == BEACON_TAG and parts[1] == run_id:
        try:
            step = int(parts[2])
            ago = float(parts[3]) if len(parts) == 4 else None
        except ValueError:
            return None, False, None
        # Bounded: 'nan' and 'inf' parse as floats, and a NaN passes no comparison.
        return step, True, ago if ago is not None and 0.0 <= ago <= 1e9 else None
    return None, False, None   # another run's beacon, or another service on the port


def probe(address, port, run_id, timeout=0.5, serve=None):
    """The step a peer's beacon reports, or None when no beacon of this run answers."""
    return probe_state(address, port, run_id, timeout, serve)[0]


def watch(address, port, run_id, step, timeout, start_grace, gone_after=2.0, lease=None):
    """Wait until the node whose beacon is at ``address`` is past ``step`` (it finished that
    step) and say where it is: {'step', 'finished', 'gone', 'timed_out', 'waited_s'}.

    This is how the controller shows progress (step k of N) without polling every node:
    one call per step, blocking on the node itself. A beacon that was answering and stops
    (for ``gone_after`` s) means the run ended there (finished, or the node died); before
    the first step it may not be up yet (``start_grace``); after that, silence is the end.
    A finished node is waited for until its beacon closes (LINGER_S): its job has then
    ended too, and the play's wait for the jobs finds it done at the first look.

    ``lease`` (a path, lease_path()): renewed at every poll - the controller still follows the
    run. A node that stopped the run (its lease ran out) is ``gone`` with ``stopped``.
    """
    started = time.time()
    seen = None
    last = None
    while True:
        if lease:
            renew_lease(lease)
        now = time.time()
        current = probe(address, port, run_id)
        if current == STOPPED:
            return {'step': last, 'finished': False, 'gone': True, 'stopped': True, 'timed_out': False,
                    'waited_s': round(now - started, 3)}
        if current is not None:
            seen, last = now, current
            if current == FINISHED:
                closing = now + LINGER_S + 1.0
                while probe(address, port, run_id) == FINISHED and time.time() < closing:
                    time.sleep(WATCH_EVERY_S)
                return {'step': None, 'finished': True, 'gone': False, 'timed_out': False,
                        'waited_s': round(time.time() - started, 3)}
            if current > step:
                return {'step': current, 'finished': False, 'gone': False, 'timed_out': False,
                        'waited_s': round(now - started, 3)}
        elif (seen is not None and now - seen > gone_after) or (seen is None and (
                step > 1 and now - started > gone_after or now - started > start_grace)):
            return {'step': last, 'finished': False, 'gone': True, 'timed_out': False, 'waited_s': round(now - started, 3)}
        if now - started > timeout:
            return {'step': last, 'finished': False, 'gone': False, 'timed_out': True, 'waited_s': round(now - started, 3)}
        time.sleep(WATCH_EVERY_S)


class Peer(object):
    """What this node knows of a peer's beacon; probed at most every PROBE_EVERY_S."""

    def __init__(self, address, port, run_id, started, dead_after, start_grace, serve=None):
        self.address, self.port, self.run_id, self.serve = address, port, run_id, serve
        self.dead_after, self.start_grace = dead_after, start_grace
        self.started = started
        self.step = None
        self.seen = None      # last answer of this run's beacon
        self.reached = None   # last time its beacon was there (answered, or accepted and busy)
        self.checked = 0.0

    def poll(self, now, every=PROBE_EVERY_S):
        if now - self.checked >= every:
            self.checked = now
            step, reached = probe_state(self.address, self.port, self.run_id, serve=self.serve)
            if step is not None:
                self.step, self.seen = step, time.time()
            if reached and self.seen is not None:
                self.reached = time.time()
        return self.step

    def lost(self, now):
        """A reason when the peer counts as gone, else None.

        Gone is a beacon that refuses or cannot be reached for ``dead_after`` s: its process
        or its node is gone. A beacon that accepts but answers late belongs to a node busy
        starting its tests (seen on a 2-core host running 36 stand-ins at once: a healthy
        peer declared lost after 10 s of late answers); it is waited for, up to
        STUCK_AFTER x ``dead_after`` s without one answer.
        """
        if self.seen is None:
            if now - self.started > self.start_grace:
                return 'no beacon of this run answered at %s:%d for %d s' % (self.address, self.port, self.start_grace)
            return None
        if now - max(self.seen, self.reached or 0) > self.dead_after:
            return 'its beacon at %s:%d stopped answering (%d s)' % (self.address, self.port, self.dead_after)
        if now - self.seen > STUCK_AFTER * self.dead_after:
            return ('its beacon at %s:%d accepts connections but has not answered for %d s (the node is stuck)'
                    % (self.address, self.port, STUCK_AFTER * self.dead_after))
        return None


class Test(object):
    """One side of one pair's test within a step."""

    def __init__(self, entry, argv, timeout, wait_for_server):
        self.entry = entry
        self.side = entry['side']
        self.argv = argv
        self.timeout = timeout
        self.wait_for_server = wait_for_server
        self.launched = None
        self.first_launch = None
        self.deadline = None
        self.retry_at = None
        self.moved_since = None
        self.arrived = None
        self.attempts = 0
        self.report = None
        self.failure = None

    @property
    def done(self):
        return self.report is not None or self.failure is not None

    def launch(self, env, now):
        self.attempts += 1
        if self.first_launch is None:
            self.first_launch = now
            self.deadline = now + self.timeout
        self.launched = _process.Launched(self.argv, env, self.side)

    def fail(self, kind, message):
        if self.launched is not None and self.launched.rc is None:
            self.launched.finish()
        self.failure = {'kind': kind, 'message': message, 'lines': []}

    def stop(self):
        if self.launched is not None and self.launched.rc is None:
            self.launched.finish()


def _where(step):
    return 'finished' if step == FINISHED else 'stopped' if step == STOPPED else 'at step %d' % step


def _step_tick(test, peer, step, env, now):
    """Advance one test by one tick."""
    waiting = test.side == 'client' and (test.launched is None or test.retry_at is not None)
    peer_step = peer.poll(now, PROBE_EVERY_S if waiting else ALIVE_EVERY_S)
    gone = peer.lost(now)
    name = test.entry.get('peer_name') or peer.address
    if test.side == 'client' and test.launched is None:
        if peer_step is not None and peer_step > step:
            test.fail('peer_moved_on', 'server %s is %s: it gave up on this test of step %d' % (name, _where(peer_step), step))
        elif gone:
            test.fail('peer_lost', 'server %s lost: %s' % (name, gone))
        elif peer_step == step:
            test.launch(env, now)
        return
    if test.side == 'client':
        if test.retry_at is not None:
            if now >= test.retry_at:
                test.retry_at = None
                test.launch(env, now)
            return
        if test.launched.exited():
            test.launched.finish()
            report = _perftest.side_report(test.launched, 'client')
            if _perftest.refused(report) and peer_step is not None and peer_step > step:
                test.fail('peer_moved_on', 'server %s is %s: it gave up on this test of step %d before the client connected'
                          % (name, _where(peer_step), step))
                return
            if _perftest.refused(report) and now < test.first_launch + test.wait_for_server:
                test.retry_at = now + 0.1
                return
            test.report = report
        elif now >= test.deadline:
            test.launched.timed_out = True
            test.launched.finish()
            test.report = _perftest.side_report(test.launched, 'client')
        return
    # server
    if test.launched.exited():
        test.launched.finish()
        test.report = _perftest.side_report(test.launched, 'server')
        return
    if test.arrived is None:
        if peer_step is not None and peer_step >= step:
            test.arrived = now
        # The timeout runs from the client's arrival at this step (seen by polling, so never
        # early): a client that is late through no fault of this pair is waited for.
        test.deadline = now + test.timeout
    if peer_step is not None and peer_step > step:
        test.moved_since = test.moved_since or now
        if now - test.moved_since > MOVED_ON_GRACE_S:
            test.fail('peer_moved_on', 'client %s is %s, past this test of step %d' % (name, _where(peer_step), step))
            return
    if gone:
        test.fail('peer_lost', 'client %s lost: %s' % (name, gone))
    elif now >= test.deadline:
        test.launched.timed_out = True
        test.launched.finish()
        test.report = _perftest.side_report(test.launched, 'server')


def _wait_listening(servers, beacon, wakeup=None):
    """Until every server of the step listens on its TCP port (read from /proc, never by
    connecting: the server takes the first connection for its client), has exited, or
    READY_GRACE_S passed (rdma_cm listens on no TCP socket; /proc may be unreadable)."""
    deadline = time.time() + READY_GRACE_S
    while time.time() < deadline:
        pending = []
        for test in servers:
            if test.launched.exited() or '-R' in test.argv or '--rdma_cm' in test.argv:
                continue
            port = _tcp_port(test.argv)
            if _process.listening(port, test.launched.proc.pid) is False:
                pending.append(test)
        if not pending:
            return
        beacon.wait(LISTEN_POLL_S, wakeup)


def _tcp_port(argv):
    for flag, value in zip(argv, argv[1:]):
        if flag == '-p':
            return int(value)
    return _perftest.DEFAULT_TCP_PORT


def _result(test, keep_output):
    entry = dict((k, v) for k, v in test.entry.items() if k not in ('peer',))
    if test.report is not None:
        report = test.report
        parsed = report['parsed']
        entry.update(status=report['status'], failure=report['failure'], results=parsed['results'],
                     tool_warnings=parsed['tool_warnings'], units=parsed['units'],
                     summary=_perftest.summarize(parsed['results']), rc=report['rc'],
                     attempts=test.attempts,
                     elapsed_s=round((test.launched.ended or time.time()) - test.first_launch, 3))
        # What to look at when a test failed; for the others, what nobody reads: perftest's banner and
        # the command were 40 % of a sequence's result (every test of a 256-node full mesh, a million,
        # goes back to the controller: tests/bench/controller_scale.py).
        if keep_output or report['status'] != 'ok':
            entry.update(stdout=report['stdout'], stderr=report['stderr'], settings=parsed['settings'], cmd=report['cmd'])
    else:
        entry.update(status='failed', failure=test.failure, results=[], settings={}, tool_warnings=[], summary={},
                     cmd=test.argv, attempts=test.attempts, elapsed_s=None)
    return entry


def _counter_values(read):
    """A counters read (error_counters()' shape) without its read times: what two reads compare by (with the
    window's counters where the read has them: module_utils/_window.py)."""
    return [(device.get('name'), [(port.get('port'), port.get('counters'), port.get('hw_counters'))
                                  for port in device.get('ports') or []])
            for device in (read or {}).get('devices') or []] + [(read or {}).get('window')]


def _read_time(read):
    for device in (read or {}).get('devices') or []:
        for port in device.get('ports') or []:
            return port.get('counters_read_at')
    return None


# How often the PCIe links are sampled while a step's tests run (``sampler`` of run_sequence): each sample is
# two sysfs reads per HCA and GPU, and one sample at the start of every step sees a link that trained down
# under load; a link that retrains many times a minute shows in the samples of a longer test.
SAMPLE_EVERY_S = 0.5


class _Sampler(object):
    """The link samples of one step: the first once the step's tests run, then every SAMPLE_EVERY_S; each
    function's distinct consecutive values, and how many samples were taken."""

    def __init__(self, sample):
        self.sample = sample
        self.taken = 0
        self.seen = {}
        self.next_at = 0.0

    def tick(self, now):
        if self.sample is None or now < self.next_at:
            return
        self.next_at = now + SAMPLE_EVERY_S
        self.taken += 1
        for bdf, value in (self.sample() or {}).items():
            values = self.seen.setdefault(bdf, [])
            if not values or values[-1] != value:
                values.append(value)

    def add_to(self, record):
        if self.sample is not None:
            record['links'] = self.seen
            record['link_samples'] = self.taken


def run_sequence(steps, build, options, counters=None, env=None, keep_output=False, sampler=None):
    """Run ``steps`` (list of {'step', 'tests': [entry...]}) and return one result per step.

    ``build(entry)`` gives a test's argv; ``options``: address, beacon_port, run_id,
    timeout, wait_for_server, dead_after, start_grace; optionally ``lease_s`` (the controller's
    lease, 0 or absent: none) and ``anchors`` (the addresses of the nodes that say when it was last
    renewed: among them the node the controller follows). ``counters()`` (optional) is read
    before the first step and after each step. An entry has ``side`` (server or client) and
    ``peer`` (the other node's address); everything else in it is returned as given.

    A step after which no error counter differs from the last read returned gets
    ``counters_same_at`` (the time of its read) instead of ``counters``: on a healthy fabric
    that is every step, and the counters of every port were most of a step's result (a
    256-node full mesh has 510 steps on each node: tests/bench/controller_scale.py).

    ``sampler()`` (optional) reads the PCIe links of the HCAs and GPUs ({bdf: [speed, width]}) while a
    step's tests run (_Sampler): each step record then has ``links`` (each function's distinct values in
    the order seen) and ``link_samples``.
    """
    env = env if env is not None else _process.c_locale_env()
    beacon = Beacon(options['address'], options['beacon_port'], options['run_id'])
    started = time.time()
    peers = {}
    results = []
    live = []
    wakeup = None
    stop = None
    try:
        stop = _Stop(options, started, beacon)
        start_counters = counters() if counters else None
        last_values = _counter_values(start_counters) if start_counters is not None else None
        with _process.Guard():
            stop.arm()
            wakeup = ChildWakeup()
            for index, spec in enumerate(steps, 1):
                step_started = time.time()
                live = _step_tests(spec, peers, build, options, started, beacon)
                sampling = _Sampler(sampler if spec.get('tests') else None)
                _run_step(live, peers, index, env, beacon, wakeup, stop, sampling)
                record = _step_record(index, spec, time.time() - step_started, step_started - started, live, keep_output)
                sampling.add_to(record)
                if counters:
                    last_values = _add_counters(record, counters(), last_values)
                results.append(record)
                if stop.reason:
                    break
            if stop.reason:
                results.extend(_not_run(steps, len(results), build, options, keep_output, stop.reason))
            _linger(beacon, stop.reason, options)
    finally:
        if stop is not None:
            stop.close()    # first: the backstop never fires while the perftest processes are reaped
        for test in live:
            test.stop()
        if wakeup is not None:
            wakeup.close()
        beacon.close()
    result = {'steps': results, 'counters_start': start_counters, 'elapsed_s': round(time.time() - started, 3)}
    if stop.reason:
        result['stopped'] = stop.reason
    return result


def _step_tests(spec, peers, build, options, started, beacon):
    """The tests of one step, each with its peer's beacon (one Peer per node, kept across steps in ``peers``)."""
    tests = []
    for entry in spec.get('tests') or []:
        key = entry['peer']
        if key not in peers:
            peers[key] = Peer(key, options['beacon_port'], options['run_id'], started,
                              options['dead_after'], options['start_grace'], beacon.serve)
        tests.append(Test(entry, build(entry), options['timeout'], options['wait_for_server']))
    return tests


def _run_step(tests, peers, index, env, beacon, wakeup, stop, sampling=None):
    """Run one step's tests to their end: servers first, then (once they listen) the clients; a stop of the
    controller's lease fails the tests not done as stopped."""
    now = time.time()
    servers = [test for test in tests if test.side == 'server']
    for test in servers:
        test.launch(env, now)
    _wait_listening(servers, beacon, wakeup)
    # Only now may clients of this step connect: their first start finds the
    # server listening (perftest clients try once), so none is started twice.
    beacon.step = index
    while not all(test.done for test in tests):
        beacon.serve()
        now = time.time()
        if stop.check(now):
            for test in tests:
                if not test.done:
                    test.fail('stopped', stop.reason)
            break
        for test in tests:
            if not test.done:
                _step_tick(test, peers[test.entry['peer']], index, env, now)
        if sampling is not None and any(test.launched is not None and not test.done for test in tests):
            sampling.tick(now)
        if not all(test.done for test in tests):
            beacon.wait(TICK_S, wakeup)
    beacon.serve()


def _step_record(index, spec, elapsed, started, tests, keep_output):
    """One step's result: when it started (seconds into the run; None: never begun), how long it took, its tests."""
    record = {'step': index, 'started': None if started is None else round(started, 3), 'elapsed_s': round(elapsed, 3),
              'tests': [_result(test, keep_output) for test in tests]}
    for key in ('round', 'memory'):
        if key in spec:
            record[key] = spec[key]
    return record


def _add_counters(record, read, last_values):
    """The counters read after a step into its record: in full when an error counter differs from the last read
    returned, else only the time of the read (``counters_same_at``). Returns the values now last returned."""
    values = _counter_values(read)
    if values == last_values and _read_time(read) is not None:
        record['counters_same_at'] = _read_time(read)
        return last_values
    record['counters'] = read
    return values


def _not_run(steps, done, build, options, keep_output, reason):
    """The steps not begun after a stop: each test failed as stopped, not run (the judging counts them with the
    tests that never reached the hardware)."""
    records = []
    for index, spec in enumerate(steps[done:], done + 1):
        tests = [Test(entry, build(entry), options['timeout'], options['wait_for_server']) for entry in spec.get('tests') or []]
        for test in tests:
            test.fail('stopped', reason)
        records.append(_step_record(index, spec, 0.0, None, tests, keep_output))
    return records


def _linger(beacon, stopped, options):
    """Stay reachable a moment so that a peer still finishing its last test sees this node moved on rather than
    lost (stopped: long enough for every node to ask)."""
    beacon.step = STOPPED if stopped else FINISHED
    linger_end = time.time() + (STOPPED_LINGER_S if stopped else min(LINGER_S, options['dead_after']))
    while time.time() < linger_end:
        beacon.wait(min(TICK_S, max(0.0, linger_end - time.time())))


class _Stop(object):
    """Whether the run must stop because its controller is gone: the newest renewal of the controller's
    lease this node knows of (its own lease file, the anchors' answers; at first the start of the run) is
    older than the lease time, or an anchor says it stopped. The backstop (SIGALRM) ends the module
    LEASE_BACKSTOP_S after that, should the loop not get to check."""

    def __init__(self, options, started, beacon):
        self.lease_s = float(options.get('lease_s') or 0)
        self.beacon = beacon
        self.port, self.run_id = options['beacon_port'], options['run_id']
        self.renewed = started
        self.lease = None
        self.anchors = []
        self.checked = 0.0
        self.reason = None
        self.armed, self.saved = False, None
        if self.lease_s <= 0:
            return
        path = lease_path(options['run_id'], options['address'])
        # Never someone else's file: one that is there already (not this run's) leaves this node without one.
        self.lease = path if path and renew_lease(path, create=True) else None
        self.anchors = [anchor for anchor in options.get('anchors') or [] if anchor and anchor != options['address']]
        beacon.renewed = started

    def check(self, now):
        if self.reason or self.lease_s <= 0 or now - self.checked < LEASE_CHECK_S:
            return self.reason
        self.checked = now
        renewed = lease_renewed(self.lease) if self.lease else None
        if renewed is not None:
            self.renewed = max(self.renewed, min(renewed, now))     # a file time in the future counts as now
        for anchor in self.anchors:
            step, _reached, ago = probe_lease(anchor, self.port, self.run_id, ANCHOR_TIMEOUT_S, self.beacon.serve)
            if step == STOPPED:
                self.reason = ('the controller stopped following the benchmark (%s stopped the run: its lease ran out); the '
                               'remaining tests were not run' % anchor)
                return self.reason
            if step is not None and ago is not None:
                self.renewed = max(self.renewed, min(time.time() - ago, now))
        self.beacon.renewed = self.renewed
        if now - self.renewed > self.lease_s:
            self.reason = ('the controller stopped following the benchmark: no renewal of its lease for %d s (ansible-playbook '
                           'killed or its connection lost); the remaining tests were not run' % int(now - self.renewed))
        else:
            self.arm()
        return self.reason

    def arm(self):
        """Set the backstop to LEASE_BACKSTOP_S past the lease's end (main thread only: elsewhere there is none)."""
        if self.lease_s <= 0:
            return
        try:
            if not self.armed:
                self.saved = signal.signal(signal.SIGALRM, self._expired)
                self.armed = True
            signal.setitimer(signal.ITIMER_REAL, max(0.1, self.renewed + self.lease_s + LEASE_BACKSTOP_S - time.time()))
        except (ValueError, OSError, AttributeError):
            pass

    def _expired(self, signum, frame):
        raise _process.Terminated('the backstop: no renewal of the controller\'s lease for %d s'
                                  % int(time.time() - self.renewed))

    def close(self):
        if self.armed:
            try:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, self.saved if self.saved is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                pass
            self.armed = False
        drop_lease(self.lease)
