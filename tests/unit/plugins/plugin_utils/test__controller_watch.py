# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A worker of a SIGKILLed ansible-playbook that runs our controller-side code ends within a
second (_controller_watch); while the controller lives, nothing happens. The controller here is
a stand-in that starts its worker as ansible-core does: a multiprocessing Process of the 'fork'
context (ansible/utils/multiprocessing.py)."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time

import pytest
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch
from tests import processes

pytestmark = pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='the test reads /proc (Linux)')

CONTROLLER = '''
import multiprocessing, os, sys, time
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch

def work(ready):
    watched = _controller_watch.stop_with_controller(0.1)
    again = _controller_watch.stop_with_controller(0.1)
    with open(ready + '.tmp', 'w') as handle:
        handle.write('%d %s %s' % (os.getpid(), watched, again))
    os.rename(ready + '.tmp', ready)
    while True:          # the unpacking, or a display call blocked on the dead queue
        time.sleep(0.05)

if __name__ == '__main__':
    assert _controller_watch.stop_with_controller() is None   # ansible-playbook itself: no watch
    multiprocessing.get_context('fork').Process(target=work, args=(sys.argv[1],)).start()
    time.sleep(600)
'''


@pytest.fixture
def controller(tmp_path):
    script, ready = tmp_path / 'fake-ansible-playbook.py', str(tmp_path / 'ready')
    script.write_text(CONTROLLER)
    proc = subprocess.Popen([sys.executable, str(script), ready], start_new_session=True)
    worker = None
    try:
        assert processes.wait_for(lambda: os.path.exists(ready), 30), 'the worker never started'
        with open(ready) as handle:
            pid, watched, again = handle.read().split()
        worker = int(pid)
        assert watched == again == str(proc.pid)   # it watches ansible-playbook, and starts one watch
        yield proc, worker
    finally:
        for pid in (proc.pid, worker):
            if pid is not None and processes.alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_the_worker_of_a_sigkilled_controller_ends_within_a_second(controller):
    proc, worker = controller
    assert processes.alive(worker)
    proc.kill()
    proc.wait()
    killed = time.time()
    assert processes.wait_for(lambda: not processes.alive(worker), 5), 'the worker outlived its ansible-playbook'
    assert time.time() - killed < 2


def test_the_worker_of_a_living_controller_goes_on(controller):
    proc, worker = controller
    time.sleep(1.0)   # ten looks at the parent
    assert proc.poll() is None and processes.alive(worker)


def test_no_watch_outside_a_worker():
    """A test, a module or ansible-playbook itself: not a multiprocessing child, nothing to watch."""
    assert _controller_watch.controller_pid() is None
    assert _controller_watch.stop_with_controller() is None


@pytest.mark.parametrize('name', ['perftest_watch', 'perftest_run', 'collective_bench'])
def test_modules_run_in_loops_have_the_watched_action(name, monkeypatch):
    """A loop runs every item in one worker: the module's own watch cannot end the next items."""
    action = importlib.import_module('ansible_collections.hpc.gpu_fabric.plugins.action.%s' % name).ActionModule
    assert issubclass(action, _controller_watch.WatchedModuleAction) and issubclass(action, NormalAction)
    calls = []
    monkeypatch.setattr(_controller_watch, 'stop_with_controller', lambda: calls.append('watch'))
    monkeypatch.setattr(NormalAction, 'run', lambda self, tmp=None, task_vars=None: calls.append('module') or {'ok': task_vars})
    assert action.run(object.__new__(action), task_vars={'x': 1}) == {'ok': {'x': 1}}
    assert calls == ['watch', 'module']
