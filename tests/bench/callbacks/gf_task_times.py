# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Wall time of every task of a run, for tests/bench/mesh_speed.py and controller_scale.py (not shipped
with the collection).

Writes JSON lines {"task": name, "s": seconds, "play": name, "start": epoch, "last_result": epoch or
null, "cpu_at_last_result": seconds or null} to $GF_TASK_TIMES: a task's time runs from its start to the next task's start (or the end of
the run), which is what the run's wall time is made of; "start" is when the task started and
"last_result" when its last host's result came in (time.time(), the clock file modification times
are on: controller_scale.py compares them with the report files' mtimes); cpu_at_last_result is the
CPU time (user and system) of ansible-playbook and its finished workers then - which a busy machine
does not inflate as it does wall time.
"""

from __future__ import annotations

import json
import os
import resource
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: gf_task_times
type: aggregate
short_description: wall time per task, for the mesh speed benchmark
description: writes one JSON line per task to the file named by GF_TASK_TIMES
'''


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'gf_task_times'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._start = time.perf_counter()
        self._play = None
        self._last_result = self._cpu = None
        self._current = ('(start of the run)', self._start, time.time(), None)
        self._rows = []

    def _mark(self, name):
        now, wall = time.perf_counter(), time.time()
        task, began, began_wall, play = self._current
        self._rows.append({'task': task, 's': round(now - began, 3), 'play': play, 'start': began_wall,
                           'last_result': self._last_result, 'cpu_at_last_result': self._cpu})
        self._current = (name, now, wall, self._play)
        self._last_result = self._cpu = None

    def _result(self, *args, **kwargs):
        self._last_result = time.time()
        # Workers are waited for (reaped) once their result is in: RUSAGE_CHILDREN counts them.
        usages = (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
        self._cpu = sum(usage.ru_utime + usage.ru_stime for usage in usages)

    v2_runner_on_ok = v2_runner_on_failed = v2_runner_on_skipped = v2_runner_on_unreachable = _result

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._mark(task.get_name())

    def v2_playbook_on_handler_task_start(self, task):
        self._mark(task.get_name())

    def v2_playbook_on_stats(self, stats):
        self._mark(None)
        path = os.environ.get('GF_TASK_TIMES')
        if path:
            with open(path, 'a') as handle:
                for row in self._rows:
                    handle.write(json.dumps(row) + '\n')
