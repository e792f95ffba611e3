# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Wait for a node's perftest_run sequence and keep its records (documentation:
plugins/modules/perftest_collect.py).

Why an action: the raw result of a sequence (every test's parsed output, every step's
counters) is several times its records, and an ansible.builtin.async_status task registers it
in hostvars - for every node at once, since the linear strategy finishes the task on all nodes
before the next task turns any of them into records. On a 256-node full mesh over 8 rails
that raw result is a million tests, 4.6 GiB on the controller (tests/bench/controller_scale.py).
Here the polling runs in the task's worker process, the raw result is turned into records
there and dropped, and only the records (or, with dest, the path of the file holding them)
go back to the controller's main process.
"""

from __future__ import annotations

import math
import time

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench


# The longest wait for a job: 30 days (a 1,024-node full mesh's budget, fabric_bench's
# __fabric_bench_budget, is a few days); and the longest pause between two looks at it.
MAX_TIMEOUT_S = 30 * 86400
MAX_DELAY_S = 3600


def _seconds(args, name, default, lowest, highest):
    """``name`` as seconds from ``lowest`` to ``highest``. Every ``-e key=value`` arrives as a string
    and float() takes 'nan' and 'inf': a NaN passes any < or > test (time.sleep then raises
    ValueError, or the poll loop never waits), so finiteness is checked first."""
    value = args.get(name, default)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise AnsibleActionFail('%s must be a number of seconds, got %r' % (name, args.get(name)))
    if not math.isfinite(value) or not lowest <= value <= highest:
        raise AnsibleActionFail('%s must be a number of seconds from %s to %s, got %s' % (name, lowest, highest, value))
    return value


CONNECTION_TRIES = 3


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('job', 'steps', 'timeout', 'delay', 'dest', 'run_id', 'cleanup'))

    def _async_status(self, jid, mode, async_dir, task_vars):
        # As ansible.builtin.async_status's action does it (ansible-core 2.16 to 2.21): the
        # module reads the job file the async wrapper writes under the shell's async_dir.
        return self._execute_module(module_name='ansible.legacy.async_status', task_vars=task_vars,
                                    module_args={'jid': jid, 'mode': mode, '_async_dir': async_dir})

    def run(self, tmp=None, task_vars=None):
        _controller_watch.stop_with_controller()   # ends this worker if ansible-playbook is killed
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        job = args.get('job')
        steps = args.get('steps')
        if not isinstance(job, dict):
            raise AnsibleActionFail('job must be the registered result of the perftest_run task (a mapping)')
        if not isinstance(steps, list):
            raise AnsibleActionFail('steps must be the list of steps the sequence was given')
        timeout = _seconds(args, 'timeout', None, 1, MAX_TIMEOUT_S)
        delay = _seconds(args, 'delay', 1, 0.1, MAX_DELAY_S)
        dest = args.get('dest')
        if dest in (None, ''):
            dest = None
        elif not isinstance(dest, string_types):
            raise AnsibleActionFail('dest must be a directory path on the controller, got %r' % (dest,))
        try:
            cleanup = boolean(args.get('cleanup', True), strict=True)
        except TypeError:
            raise AnsibleActionFail('cleanup must be a boolean, got %r' % (args.get('cleanup'),))
        run_id = args.get('run_id')
        run_id = to_text(run_id) if run_id not in (None, '') else None
        host = to_text(task_vars.get('inventory_hostname') if task_vars else self._task.get_name())

        jid = job.get('ansible_job_id')
        outcome = job
        waited = 0.0
        polls = 0
        if jid and not self._task.check_mode:
            async_dir = self._remote_expand_user(self.get_shell_option('async_dir', default='~/.ansible_async'))
            started = time.monotonic()
            lost = 0
            try:
                while True:
                    try:
                        outcome = self._async_status(jid, 'status', async_dir, task_vars)
                        lost = 0
                    except AnsibleConnectionFailure:
                        # A connection that drops once in a long wait is not a lost node; three in a
                        # row are (the node is then unreachable, as with async_status).
                        lost += 1
                        if lost >= CONNECTION_TRIES:
                            raise
                        time.sleep(delay)
                        continue
                    polls += 1
                    waited = time.monotonic() - started
                    if outcome.get('finished') or waited >= timeout:
                        break
                    time.sleep(min(delay, max(0.0, timeout - waited)))
                if not outcome.get('finished'):
                    # Still running after its budget: its tests fail with this message, none is "ok".
                    outcome = {'failed': True,
                               'msg': 'perftest_run was still running on %s after %d s (the wait budget); its '
                                      'results were not collected' % (host, round(waited))}
                elif cleanup:
                    # Read: the job file (the whole raw result) is not left on the node. Best effort:
                    # the result is in hand, and a node that drops now loses none of it.
                    try:
                        self._async_status(jid, 'cleanup', async_dir, task_vars)
                    except AnsibleError as exc:
                        result.setdefault('warnings', []).append(
                            'the job file of %s (%s) could not be removed from the node: %s' % (jid, host, exc))
            finally:
                self._remove_tmp_path(self._connection._shell.tmpdir)

        records = _bench.sequence_records(host, steps, outcome)
        not_ok = sum(1 for record in records if record.get('status') != 'ok')
        result.update(changed=False, tests=len(records), not_ok=not_ok, finished=bool(outcome.get('finished')) or not jid,
                      waited_s=round(waited, 1), polls=polls)
        result['records_file'] = None
        if dest is not None:
            try:
                result['records_file'] = _bench.write_records(to_text(dest), host, records, run_id)
            except (OSError, TypeError, ValueError) as exc:
                # The node's tests ran: they are kept in hostvars instead, and the run says why.
                result.setdefault('warnings', []).append(
                    'the records of %s could not be written into %s (%s): they are kept in memory instead' % (host, dest, exc))
        if result['records_file'] is None:
            result['records'] = records
        return result
