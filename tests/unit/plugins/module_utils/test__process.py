# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The process supervisor: listeners read from /proc/net/tcp, a run bounded by its timeout
that leaves nothing of its process group behind, Terminated on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process


# /proc/net/tcp of this test machine, a listener on 127.0.1.1:18515 and a closed
# connection to it (TIME_WAIT, st 06) on the same local port.
PROC_NET_TCP = (
    '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n'
    '   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1579 1 00000000fff5c44d 100 0 0 10 0\n'
    '   1: 0101007F:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 341457 1 0000000098ef7b0a 100 0 0 10 0\n'
    '   2: 0100007F:4853 0100007F:B4A0 06 00000000:00000000 03:000010F7 00000000     0        0 0 3 00000000db6e78aa\n')


def test_parse_proc_net_tcp():
    assert _process.parse_proc_net_tcp(PROC_NET_TCP, 18515) == {'341457'}
    assert _process.parse_proc_net_tcp(PROC_NET_TCP, 2024) == {'1579'}
    assert _process.parse_proc_net_tcp(PROC_NET_TCP, 22) == set()
    assert _process.parse_proc_net_tcp('', 18515) == set()


@pytest.mark.skipif(not os.path.exists('/proc/net/tcp'), reason='needs Linux /proc')
def test_listening_is_ours_only():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    assert _process.listening(port, os.getpid()) is False      # bound, not listening
    sock.listen(1)
    other = subprocess.Popen(['sleep', '5'])
    try:
        assert _process.listening(port, os.getpid()) is True
        # Someone else's listener on the port: a busy port, not our server.
        assert _process.listening(port, other.pid) is False
    finally:
        other.kill()
        other.wait()
        sock.close()


def _gone(pid):
    try:
        with open('/proc/%d/stat' % pid) as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except (IOError, OSError):
        return True


def test_run_returns_the_reaped_process_with_its_output():
    launched = _process.run([sys.executable, '-c', 'import os, sys; print(os.environ["LC_ALL"]); sys.stderr.write("e"); sys.exit(3)'],
                            10, name='benchmark')
    assert (launched.rc, launched.timed_out, launched.killed, launched.name) == (3, False, False, 'benchmark')
    assert launched.output() == ['C\n', 'e']
    assert launched.ended >= launched.started


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='reads /proc (Linux)')
def test_run_timeout_kills_the_whole_group():
    start = time.time()
    launched = _process.run(['sh', '-c', 'sleep 30 & echo $!; sleep 30'], 0.5)
    assert time.time() - start < 5
    assert launched.timed_out and launched.killed and launched.rc < 0
    child = int(launched.output()[0].split()[0])
    # SIGKILL went to the group; the kernel delivers it when the child next runs.
    deadline = time.time() + 5
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.02)
    assert _gone(child)


def test_guard_turns_sigterm_into_terminated_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(_process.Terminated):
        with _process.Guard():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted by the handler
    assert signal.getsignal(signal.SIGTERM) is before


def test_c_locale_env_keeps_the_rest():
    env = _process.c_locale_env({'PATH': '/bin', 'LANG': 'de_DE.UTF-8'})
    assert env == {'PATH': '/bin', 'LANG': 'C', 'LC_ALL': 'C', 'LC_MESSAGES': 'C'}
