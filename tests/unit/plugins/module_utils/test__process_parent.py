# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A module whose controller is gone stops its children within seconds (_process.ParentWatch);
an async job, meant to outlive the controller, does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests import processes

pytestmark = pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='the watch reads /proc (Linux)')

# The module: what collective_bench and perftest_run do, a run under Guard.
MODULE = '''
import sys
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process
try:
    _process.run(['sleep', sys.argv[1]], 900)
except _process.Terminated:
    sys.exit(3)
'''
# A process above it that stays until killed: the '/bin/sh -c' and the worker of the local
# connection, or ansible-playbook itself. argv[1] names what it starts, the rest is passed on.
HOLDER = '''
import subprocess, sys, time
subprocess.Popen(sys.argv[2:], env=None if sys.argv[1] == '-' else dict(__import__('os').environ, ANSIBLE_ASYNC_DIR=sys.argv[1]))
time.sleep(600)
'''


def _pids_of(argv):
    """Processes whose command line starts with ``argv`` (this test's own: a unique word or path)."""
    want = [arg.encode() for arg in argv]
    found = []
    for name in os.listdir('/proc'):
        if name.isdigit():
            try:
                with open('/proc/%s/cmdline' % name, 'rb') as handle:
                    if handle.read().split(b'\0')[:len(want)] == want:
                        found.append(int(name))
            except (IOError, OSError):
                pass
    return found


def _pids_running(word):
    return _pids_of(['sleep', word])


@pytest.fixture
def scripts(tmp_path):
    module, holder = tmp_path / 'module.py', tmp_path / 'fake-ansible-playbook.py'
    module.write_text(MODULE)
    holder.write_text(HOLDER)
    # The parent of an async job: ansible-core's async_wrapper.py, as its command line names it.
    (tmp_path / 'async_wrapper.py').write_text(HOLDER)
    started = []
    yield str(module), str(holder), started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start(started, argv, word):
    proc = subprocess.Popen(argv)
    started.append(proc)
    assert processes.wait_for(lambda: _pids_running(word), 15), 'the module never started its sleep'
    return proc, _pids_running(word)[0]


def _cleanup(word):
    for pid in _pids_running(word):
        os.kill(pid, signal.SIGKILL)


def test_sigkilled_parent_stops_the_tool_within_seconds(scripts):
    module, holder, started = scripts
    word = '301.%d' % os.getpid()
    parent, sleeper = _start(started, [sys.executable, holder, '-', sys.executable, module, word], word)
    try:
        parent.kill()
        parent.wait()
        killed_at = time.time()
        assert processes.wait_for(lambda: not processes.alive(sleeper), 5), 'the tool outlived its controller'
        assert time.time() - killed_at < 5
    finally:
        _cleanup(word)


def test_sigkilled_controller_above_a_living_worker_stops_the_tool(scripts):
    """ansible-playbook SIGKILLed: its worker and the worker's '/bin/sh -c' stay, blocked on the
    module's output; the module notices its ancestor is gone all the same."""
    module, holder, started = scripts
    word = '302.%d' % os.getpid()
    controller, sleeper = _start(started, [sys.executable, holder, '-', sys.executable, holder, '-', '/bin/sh', '-c',
                                           '"$0" "$1" "$2"; sleep 0', sys.executable, module, word], word)
    try:
        controller.kill()
        controller.wait()
        assert processes.wait_for(lambda: not processes.alive(sleeper), 5), 'the tool outlived the controller'
    finally:
        _cleanup(word)
        for pid in _pids_of([sys.executable, holder, '-', '/bin/sh']):  # the worker, orphaned
            os.kill(pid, signal.SIGKILL)


def test_an_async_job_outlives_its_controller(scripts):
    """async_wrapper jobs are meant to outlive the controller: no watch under async_wrapper with
    ANSIBLE_ASYNC_DIR."""
    module, holder, started = scripts
    word = '303.%d' % os.getpid()
    wrapper = os.path.join(os.path.dirname(holder), 'async_wrapper.py')
    parent, sleeper = _start(started, [sys.executable, wrapper, '/tmp/async', sys.executable, module, word], word)
    try:
        parent.kill()
        parent.wait()
        time.sleep(2.5)
        assert processes.alive(sleeper)
    finally:
        _cleanup(word)


def test_async_dir_in_the_environment_alone_is_no_async_job(scripts):
    """A local-connection module inherits the controller's environment, where ANSIBLE_ASYNC_DIR
    may be a setting (scripts/demo.sh exports it): without async_wrapper above it, it is watched."""
    module, holder, started = scripts
    word = '304.%d' % os.getpid()
    parent, sleeper = _start(started, [sys.executable, holder, '/tmp/async', sys.executable, module, word], word)
    try:
        parent.kill()
        parent.wait()
        assert processes.wait_for(lambda: not processes.alive(sleeper), 5), 'the tool outlived its controller'
    finally:
        _cleanup(word)
