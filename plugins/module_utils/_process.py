# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Launching, bounding and reaping the tools a module runs (perftest, nccl-tests and their
launchers), and telling whether a process listens on a TCP port.

A ``Launched`` process runs in its own session (process group), with its output in temp
files; ``finish`` stops whatever of the group still runs (TERM, then KILL) and reaps it.
It dies with the module (PR_SET_PDEATHSIG), and ``Guard`` - held while tools run - turns
SIGTERM/SIGHUP into ``Terminated`` (so that ``finally`` reaps) and starts a ``ParentWatch``
that stops everything when the controller is gone. ``run`` is all of that for one process
bounded by a timeout.

``listening`` reads /proc/net/tcp instead of connecting, because a perftest server takes
the first connection for its client; ``parse_proc_net_tcp`` is the pure part of it.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import stat
import subprocess
import tempfile
import threading
import time


def c_locale_env(base=None):
    """``base`` (default: this process' environment) with the C locale, so that the tools print
    the messages and number formats the parsers know."""
    env = dict(os.environ if base is None else base)
    env.update(LANG='C', LC_ALL='C', LC_MESSAGES='C')
    return env


# ---------------------------------------------------------------------------- listening

_TCP_LISTEN = '0A'  # include/net/tcp_states.h TCP_LISTEN = 10


def parse_proc_net_tcp(text, port):
    """Inodes of the sockets LISTENing on ``port`` in /proc/net/tcp or tcp6 text.

    Format: net/ipv4/tcp_ipv4.c get_tcp4_sock() ('sl local_address rem_address st ...
    uid timeout inode'), addresses as hex 'ADDR:PORT'.
    """
    inodes = set()
    for line in (text or '').splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ':' not in fields[1]:
            continue
        try:
            local_port = int(fields[1].rsplit(':', 1)[1], 16)
        except ValueError:
            continue
        if local_port == port and fields[3] == _TCP_LISTEN:
            inodes.add(fields[9])
    return inodes


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def socket_inodes(pid, proc='/proc'):
    """Socket inodes open by ``pid`` (from /proc/<pid>/fd links 'socket:[N]'), or None if unreadable."""
    base = '%s/%d/fd' % (proc, pid)
    try:
        names = os.listdir(base)
    except OSError:
        return None
    inodes = set()
    for name in names:
        try:
            target = os.readlink(os.path.join(base, name))
        except OSError:
            continue
        if target.startswith('socket:['):
            inodes.add(target[8:-1])
    return inodes


def listening(port, pid, proc='/proc'):
    """Is ``pid`` listening on TCP ``port``? None when /proc cannot tell.

    The port is watched, not connected to: a perftest server accepts exactly one
    connection (perftest_communication.c ethernet_server_connect(): listen(fd, 1),
    one accept()), so a probe connection would be taken for the client.
    """
    tables = [_read('%s/net/tcp' % proc), _read('%s/net/tcp6' % proc)]
    if tables == [None, None]:
        return None
    inodes = set()
    for text in tables:
        inodes |= parse_proc_net_tcp(text, port)
    if not inodes:
        return False
    own = socket_inodes(pid, proc)
    # Another process' listener on the port is not our server (a busy port).
    return bool(inodes & own) if own is not None else True


# ---------------------------------------------------------------------------- running

_PR_SET_PDEATHSIG = 1


def _die_with(parent):
    """preexec_fn: the child dies with the module (PR_SET_PDEATHSIG survives exec of a
    non-setuid binary, prctl(2)), so that even a SIGKILLed module leaves no server."""

    def setup():
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # not Linux: the deadline and killpg still apply
            pass
        if os.getppid() != parent:  # the module died before prctl took effect
            os._exit(127)

    return setup


# Process groups of the Launched that still run: what the parent watch kills.
_LIVE: set[int] = set()


# proc(5) states of a process that has exited: Z (zombie: dead, its parent has not reaped it
# yet) and X (dead). A SIGKILLed ansible-playbook whose own parent never calls wait() stays a
# zombie, its pid and start time unchanged; it runs nothing and will read nothing.
_DEAD_STATES = (b'Z', b'X', b'x')


def _proc_stat(pid):
    """(ppid, start time in clock ticks, cmdline bytes) of ``pid`` from /proc, or None when gone
    (no such process, or one that has exited but is not reaped yet: a zombie).
    proc(5): the fields after the ')' that ends comm are state, ppid, ..., starttime (field 22)."""
    try:
        with open('/proc/%d/stat' % pid, 'rb') as handle:
            fields = handle.read().rsplit(b')', 1)[1].split()
        if fields[0] in _DEAD_STATES:
            return None
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            cmdline = handle.read()
        return int(fields[1]), int(fields[19]), cmdline
    except (IOError, OSError, IndexError, ValueError):
        return None


class ParentWatch(object):
    """Stops the launched processes within seconds when the controller is gone.

    A module's processes are the module's children, so PR_SET_PDEATHSIG (_die_with) kills them
    only when the module itself dies; but a SIGKILLed ansible-playbook leaves the module running:
    with the local connection its parent '/bin/sh -c' and the worker process above it stay, blocked
    on the module's output, until the module's own timeout (900 s for collective_bench). So a
    thread polls the ancestors seen at the start - up to and including the outermost one of the
    ansible processes (the worker and ansible-playbook, forked from it), else the nearest three
    (sh, sshd session, sshd on a remote node) - and the module's stdout (sshd closes its end of
    the pipe when the connection drops). When one is gone, the process groups of _LIVE are
    killed and the module gets SIGTERM, which Guard turns into Terminated.

    Async tasks are left alone: async_wrapper runs them in a session of their own precisely so
    that they outlive the controller (ansible/modules/async_wrapper.py: setsid, double fork), and
    the action plugin puts ANSIBLE_ASYNC_DIR in their environment
    (ansible/plugins/action/__init__.py _execute_module, wrap_async). That variable alone does not
    make an async job: with the local connection every module inherits the controller's
    environment, where ANSIBLE_ASYNC_DIR may be a setting (scripts/demo.sh exports it), so an
    async job is one whose parent is async_wrapper (the process that waits for it and kills it
    at its time limit).
    """

    INTERVAL = 0.5
    NEAREST = 3
    DEPTH = 16

    def __init__(self):
        self._stop = threading.Event()
        self._thread = None
        self.parent = os.getppid()
        self.watched = []

    @staticmethod
    def wanted():
        if not os.path.isdir('/proc/self'):
            return False
        if 'ANSIBLE_ASYNC_DIR' not in os.environ:
            return True
        parent = _proc_stat(os.getppid())
        return parent is None or b'async_wrapper' not in parent[2]

    def _ancestors(self):
        chain, pid = [], self.parent
        while pid > 1 and len(chain) < self.DEPTH:
            info = _proc_stat(pid)
            if info is None:
                break
            chain.append((pid, info[1], b'ansible' in info[2]))
            pid = info[0]
        ansible = [index for index, (_pid, _start, is_ansible) in enumerate(chain) if is_ansible]
        if ansible:
            last = ansible[0]
            while last + 1 < len(chain) and chain[last + 1][2]:
                last += 1
            return [(pid, start) for pid, start, _a in chain[:last + 1]]
        return [(pid, start) for pid, start, _a in chain[:self.NEAREST]]

    def gone(self):
        """What is gone (a sentence), or None while the controller is there."""
        if os.getppid() != self.parent:
            return 'the parent process %d exited' % self.parent
        for pid, start in self.watched:
            info = _proc_stat(pid)
            if info is None or info[1] != start:
                return 'the ancestor process %d exited' % pid
        if self._stdout_closed():
            return "the reader of the module's output went away"
        return None

    @staticmethod
    def _stdout_closed():
        try:
            if not hasattr(select, 'poll') or not _is_pipe(1):
                return False
            poller = select.poll()
            poller.register(1, select.POLLERR | select.POLLHUP)
            return any(event & (select.POLLERR | select.POLLHUP) for _fd, event in poller.poll(0))
        except (OSError, ValueError):
            return False

    def start(self):
        if not self.wanted():
            return self
        self.watched = self._ancestors()
        self._thread = threading.Thread(target=self._run, name='parent-watch')
        self._thread.daemon = True
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.INTERVAL):
            why = self.gone()
            if why:
                kill_live()
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def stop(self):
        self._stop.set()


def _is_pipe(fd):
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _group_members(pgid, leader):
    """PIDs of the group ``pgid`` that still run (not zombies), the leader left out; None without /proc."""
    try:
        names = os.listdir('/proc')
    except OSError:
        return None
    members = []
    for name in names:
        if not name.isdigit() or int(name) == leader:
            continue
        try:
            with open('/proc/%s/stat' % name, 'rb') as handle:
                stat = handle.read(4096).decode('ascii', 'replace')
        except OSError:
            continue
        # Fields after the command's closing parenthesis: state, ppid, pgrp (proc(5)).
        fields = stat[stat.rfind(')') + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ('Z', 'X'):
            members.append(int(name))
    return members


def _wait_group_gone(pgid, leader, deadline, step=0.01):
    """After SIGKILL, until the group's other processes have exited (the kernel delivers the signal at
    once, the exit takes a moment): a caller that returns finds none of them left."""
    while time.time() < deadline:
        members = _group_members(pgid, leader)
        if not members:
            return
        time.sleep(step)


def kill_live():
    """SIGKILL to every process group still running (the controller is gone)."""
    for pgid in list(_LIVE):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Launched(object):
    """One process in its own session (process group), output in temp files. ``name`` says
    which side or part it is (server, client, benchmark) in messages."""

    def __init__(self, argv, env, name='process'):
        self.argv = list(argv)
        self.name = name
        self.started = time.time()
        self.ended = None
        self.rc = None
        self.timed_out = False
        self.killed = False
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err, env=env,
                                     close_fds=True, start_new_session=True, preexec_fn=_die_with(os.getpid()))
        _LIVE.add(self.proc.pid)

    def exited(self):
        """Has the leader exited? It stays a zombie (not reaped) so its pgid stays ours."""
        if self.rc is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def wait_until(self, deadline, step=0.02):
        while not self.exited():
            if time.time() >= deadline:
                return False
            time.sleep(step)
        return True

    def _signal_group(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self, grace=2.0):
        """Stop whatever still runs in the group (TERM, then KILL), reap, read the output."""
        if self.rc is not None:
            return self
        if not self.exited():
            self.killed = True
            self._signal_group(signal.SIGTERM)
            self.wait_until(time.time() + grace)
        # Stragglers of the group, and a leader that ignored TERM. The leader is not
        # reaped yet, so the group id cannot have been reused.
        self._signal_group(signal.SIGKILL)
        _wait_group_gone(self.proc.pid, self.proc.pid, time.time() + 2.0)
        self.rc = self.proc.wait()
        _LIVE.discard(self.proc.pid)
        self.ended = time.time()
        return self

    def output(self):
        texts = []
        for handle in (self._out, self._err):
            handle.seek(0)
            texts.append(handle.read().decode('utf-8', 'replace'))
            handle.close()
        return texts


class Terminated(Exception):
    """The module was asked to stop (SIGTERM/SIGHUP) while its tools ran; all of them were reaped."""


class Guard(object):
    """Turns SIGTERM/SIGHUP into Terminated while tools run, so that ``finally`` reaps,
    and watches the controller (ParentWatch) meanwhile."""

    def __enter__(self):
        self.saved = {}
        self.watch = None

        def handler(signum, frame):
            raise Terminated('signal %d' % signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self.saved[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):  # not the main thread
                pass
        if self.saved:  # the watch ends in a SIGTERM: only where it becomes Terminated
            self.watch = ParentWatch().start()
        return self

    def __exit__(self, *exc):
        if self.watch is not None:
            self.watch.stop()
        for sig, old in self.saved.items():
            signal.signal(sig, old)
        return False


def run(argv, timeout, env=None, name='process'):
    """Run ``argv`` to completion or ``timeout`` seconds under Guard and return its finished
    Launched (``timed_out`` set when the time was up); it is reaped whatever happens.
    ``env`` defaults to this environment in the C locale."""
    launched = None
    with Guard():
        try:
            launched = Launched(argv, env if env is not None else c_locale_env(), name)
            if not launched.wait_until(launched.started + timeout):
                launched.timed_out = True
        finally:
            if launched is not None:
                launched.finish()
    return launched
