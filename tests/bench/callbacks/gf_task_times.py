# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Wall time of every task of a run, for tests/bench/mesh_speed.py (not shipped with the collection).

Writes JSON lines {"task": name, "s": seconds} to $GF_TASK_TIMES: a task's time runs from its start
to the next task's start (or the end of the run), which is what the run's wall time is made of.
"""

from __future__ import annotations

import json
import os
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
        self._current = ('(start of the run)', self._start)
        self._rows = []

    def _mark(self, name):
        now = time.perf_counter()
        self._rows.append({'task': self._current[0], 's': round(now - self._current[1], 3)})
        self._current = (name, now)

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
