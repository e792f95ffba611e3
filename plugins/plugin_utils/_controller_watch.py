# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Controller-side code of this collection ends with its ansible-playbook.

ansible-playbook runs each task in a worker process forked from it (WorkerProcess in
ansible/executor/process/worker.py, a multiprocessing Process of the 'fork' context in
ansible/utils/multiprocessing.py); our action plugins and filters (the snapshot unpacking of
offline.yml, the benchmark's polling and judging, the report) run in that worker. A SIGKILLed
ansible-playbook takes none of its workers with it: one in our code goes on with work whose
result nobody will read, and then, like every other worker, blocks for good writing that result
to the queue (FinalQueue in ansible/executor/task_queue_manager.py: a pipe whose read end the
workers hold too, so the write never fails, it waits).

``stop_with_controller`` - called where our controller-side code starts - watches the worker's
parent from a thread, and when it is gone ends the worker at once (os._exit: no cleanup of the
controller's is left to run, and nothing would read its result). Modules have their own watch
(module_utils/_process.py ParentWatch), which ends the module's run; but a task that loops runs
every item in the same worker, which then starts the module for the next item, whose watch no
longer sees the controller it never knew: the modules that tasks run in loops (perftest_watch
follows the benchmark step by step; offline.yml's perftest_run and collective_bench read one log
each) have ``WatchedModuleAction`` for action plugin. Workers that run only ansible-core's code
stay (the README says how to find and end them).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from typing import Any

from ansible.plugins.action.normal import ActionModule as _NormalAction

# How often the parent is looked at: a worker outlives its controller by at most this.
INTERVAL = 0.5
# The exit status of a worker ended so (128 + SIGTERM, as if it had been terminated).
EXIT_STATUS = 143

_watching: dict[int, int] = {}   # pid -> the parent pid its watch follows (a forked worker inherits the dict)


def controller_pid() -> int | None:
    """The pid of the ansible-playbook this process is a worker of, or None: not a process that
    multiprocessing started (ansible-playbook itself, a module, a test)."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid != os.getppid():
        return None
    return parent.pid


def stop_with_controller(interval: float = INTERVAL) -> int | None:
    """Start the watch in this worker (once per process) -> the controller's pid, or None where
    there is nothing to watch."""
    pid = os.getpid()
    if pid in _watching:
        return _watching[pid]
    parent = controller_pid()
    if parent is None:
        return None
    _watching[pid] = parent
    thread = threading.Thread(target=_watch, args=(parent, interval), name='gpu-fabric-controller-watch')
    thread.daemon = True
    thread.start()
    return parent


def _watch(parent: int, interval: float) -> None:
    # The worker's parent pid changes (to init or a subreaper) the moment ansible-playbook dies.
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(EXIT_STATUS)


class WatchedModuleAction(_NormalAction):  # type: ignore[misc]  # ansible-core is not typed: its classes are Any to mypy
    """The action plugin of a module that tasks run in loops: ansible-core's own action for a module
    (ansible/plugins/action/normal.py: check mode, async and all), in a worker that ends with its
    ansible-playbook."""

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        stop_with_controller()
        result: dict[str, Any] = super(WatchedModuleAction, self).run(tmp, task_vars)
        return result
