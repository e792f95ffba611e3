# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Values that go onto another tool's command line, checked before anything runs.

A host name reaches mpirun's ``--host a,b`` and srun's ``--nodelist=a,b`` (a comma adds a
host), perftest's server address and ``-d`` device (a leading '-' makes an option of it:
``-oProxyCommand=...`` for the ssh that mpirun starts). execve(2) takes C strings, so a NUL
ends an argument early; Python refuses it with a ValueError deep in subprocess instead.
"""

from __future__ import annotations

import re
from typing import Any

# RFC 1123 host names and IPv4 addresses (letters, digits, '.', '-'), '_' as in many
# inventories and Slurm node names, ':' for IPv6; never a leading '-'.
_HOST_RE = re.compile(r'^[A-Za-z0-9_.:][A-Za-z0-9_.:-]{0,252}$')
# An environment variable name as POSIX defines it (Base Definitions 8.1): the portable set.
_ENV_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


def check_host(value: Any, option: str) -> str:
    """Raise ValueError naming ``option`` when ``value`` is no host name or address."""
    if not isinstance(value, str) or not _HOST_RE.match(value):
        raise ValueError('%s: %r is not a host name or address (letters, digits, ".", "-", "_", ":" for IPv6, '
                         'not starting with "-")' % (option, value))
    return value


def check_hosts(values: Any, option: str) -> Any:
    for value in values or []:
        check_host(value, option)
    return values


def check_args(values: Any, option: str) -> Any:
    """Raise ValueError naming ``option`` when an argument holds a NUL byte (execve(2) cannot pass it)."""
    for value in values or []:
        if '\0' in str(value):
            raise ValueError('%s: %r holds a NUL byte, which no command-line argument can carry' % (option, value))
    return values


def check_env(env: Any, option: str) -> Any:
    """Raise ValueError naming ``option`` for a variable name that is not portable or a value with a NUL."""
    for name, value in (env or {}).items():
        if not _ENV_NAME_RE.match(str(name)):
            raise ValueError('%s: %r is not an environment variable name (letters, digits and "_", not starting with a digit)'
                             % (option, name))
        if '\0' in str(value):
            raise ValueError('%s: the value of %s holds a NUL byte, which no environment variable can carry' % (option, name))
    return env


def check_no_nul(params: dict[str, Any]) -> None:
    """Raise ValueError naming the first option (of a module's params) whose text holds a NUL:
    every one of them ends up in an argv, an environment or a path, none of which can carry it."""
    for option in sorted(params):
        value = params[option]
        if isinstance(value, dict):
            items = [(name, name) for name in value] + [('the value of %s' % name, text) for name, text in value.items()]
        else:
            items = [(None, text) for text in (value if isinstance(value, list) else [value])]
        for what, text in items:
            if isinstance(text, str) and '\0' in text:
                raise ValueError('%s: %s holds a NUL byte, which no command-line argument, environment variable or '
                                 'path can carry' % (option, what or repr(text)))
