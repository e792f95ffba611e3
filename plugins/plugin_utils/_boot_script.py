# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A module's boot plan as the body of a POSIX sh script (filter ``boot_script``).

``roce_qos`` and ``acs_disable`` return ``boot_plan``: the steps that set what they set, in
order, from the same plan as their changes now (``_roce.settings``, ``acs_disable``'s plan).
The roles' boot scripts are this rendering of it, so no template decides a command again.

A step is one of (the modules' RETURN documents them):

- ``{'argv': [...]}``: the command, its stdout dropped (mlnx_qos prints the whole
  configuration back after a change), its stderr left to the unit's journal;
- ``{'write': path, 'value': text, 'skip_if_absent': bool}``: the text and a newline into the
  file; with ``skip_if_absent``, nothing where the file does not exist;
- ``{'mkdir': path}``: the directory, unless it is there.

Every step runs, whatever the one before did; one that fails sets ``status=1`` and the script
ends with ``exit $status``, so its systemd unit shows failed and the journal says which.

Rendered here, on the controller, not in module_utils: the plan is the data the module returns
(the task's result shows it and check mode has it), the text is what the role's template writes
from it; nothing of this reaches a node in a module's payload (AnsiballZ).

Every word goes through shlex.quote and no value goes into a comment: a name from the node's
sysfs (a netdev may hold shell metacharacters, quotes or a newline) stays one inert argument.
A word with a NUL byte cannot be an argument of a command at all and is refused, as is a path
that is not absolute or a step of a kind this renderer does not know (fail closed: a step is
never left out silently).
"""

from __future__ import annotations

import shlex
from typing import Any, Sequence

HEADER = ('# Every step runs; one that fails makes the script exit 1 (the unit shows failed, the journal why).',
          'status=0')
KEYS: dict[str, set[str]] = {
    'argv': {'argv'},
    'write': {'write', 'value', 'skip_if_absent'},
    'mkdir': {'mkdir'},
}


class PlanError(ValueError):
    """A boot plan this renderer cannot write faithfully."""


def _word(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise PlanError('%s must be a string, got %s' % (what, type(text).__name__))
    if '\x00' in text:
        raise PlanError('%s %s holds a NUL byte, which no command argument can carry' % (what, ascii(text)[:80]))
    return shlex.quote(text)


def _path(text: object, what: str) -> str:
    word = _word(text, what)
    if not str(text).startswith('/'):
        raise PlanError('%s %s is not an absolute path' % (what, ascii(text)[:80]))
    return word


def line(step: object) -> str:
    """The sh line of one step."""
    if not isinstance(step, dict):
        raise PlanError('a step must be a mapping, got %s' % type(step).__name__)
    kinds = [kind for kind in KEYS if kind in step]
    if len(kinds) != 1:
        raise PlanError('a step has exactly one of %s, got keys %s' % (', '.join(KEYS), ', '.join(sorted(map(str, step))) or 'none'))
    kind = kinds[0]
    extra = set(step) - KEYS[kind]
    if extra:
        raise PlanError('a %s step has no key %s' % (kind, ', '.join(sorted(map(str, extra)))))
    if kind == 'argv':
        argv = step['argv']
        if not isinstance(argv, (list, tuple)) or not argv:
            raise PlanError('argv must be a non-empty list of strings')
        return '%s >/dev/null || status=1' % ' '.join(_word(arg, 'an argument') for arg in argv)
    if kind == 'mkdir':
        path = _path(step['mkdir'], 'the directory')
        return '[ -d %s ] || mkdir %s || status=1' % (path, path)
    path = _path(step['write'], 'the file')
    if 'value' not in step:
        raise PlanError('a write step needs its value')
    write = "printf '%%s\\n' %s > %s || status=1" % (_word(step['value'], 'the value'), path)
    if step.get('skip_if_absent', False) is True:
        return 'if [ -e %s ]; then %s; fi' % (path, write)
    if step.get('skip_if_absent', False) is not False:
        raise PlanError('skip_if_absent must be true or false')
    return write


def render(plan: Sequence[Any]) -> str:
    """The script's body for ``plan`` (a list of steps): 'status=0', a line per step, 'exit $status'."""
    if not isinstance(plan, (list, tuple)):
        raise PlanError('a boot plan is a list of steps, got %s' % type(plan).__name__)
    return '\n'.join(list(HEADER) + [line(step) for step in plan] + ['exit $status']) + '\n'
