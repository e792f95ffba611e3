# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Documented in plugins/filter/role_variable_errors.yml (this file has no DOCUMENTATION, as ansible-core's filter/core.py).
import glob
import os
from typing import Any, Callable

import yaml

from ansible.errors import AnsibleError, AnsibleFilterError
from ansible.module_utils.common.validation import (check_type_bool, check_type_dict, check_type_float, check_type_int,
                                                    check_type_list)

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._printable import printable
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._inventory import VARIABLE as EXPECTED, expected_errors

# The collection's roles, beside plugins/ (in a checkout and in an installed copy alike).
ROLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'roles')
# The conversions role argument validation makes (ansible.module_utils.common.parameters: DEFAULT_TYPE_VALIDATORS),
# so that what is refused here is what a role would refuse, and what it takes ('30', 'yes', 'a,b') is taken.
CHECKS = {
    'int': (check_type_int, 'a whole number'),
    'float': (check_type_float, 'a number'),
    'bool': (check_type_bool, 'true or false'),
    'list': (check_type_list, 'a list'),
    'dict': (check_type_dict, 'a mapping (JSON, or key=value pairs)'),
}
# A value as the message shows it: enough to recognise what was typed.
SHOWN = 60
_SPECS: list[dict[str, Any]] = []


def role_options() -> dict[str, Any]:
    """{variable: (role, option)} of every role's meta/argument_specs.yml (entry point main), read once."""
    if not _SPECS:
        options: dict[str, Any] = {}
        for path in sorted(glob.glob(os.path.join(ROLES, '*', 'meta', 'argument_specs.yml'))):
            with open(path, encoding='utf-8') as handle:
                spec = yaml.safe_load(handle)['argument_specs']['main'].get('options') or {}
            role = os.path.basename(os.path.dirname(os.path.dirname(path)))
            options.update((name, (role, option)) for name, option in spec.items())
        _SPECS.append(options)
    return _SPECS[0]


def _shown(value: object) -> str:
    text = printable(value if isinstance(value, str) else repr(value))
    text = text if len(text) <= SHOWN else text[:SHOWN - 3] + '...'
    return "'%s'" % text if isinstance(value, str) else text


def variable_error(name: str, value: Any) -> str | None:
    """One line saying why ``value`` is no value of the role variable ``name``, or None when it is one
    (or ``name`` is no role variable, or the value is null: the role's default then)."""
    if name not in role_options() or value is None:
        return None
    role, option = role_options()[name]
    kind = option.get('type', 'str')
    check, expected = CHECKS.get(kind, (None, None))
    if check is not None:
        try:
            value = check(value)
        except (TypeError, ValueError):
            # No ': ' in the line: the yaml result format prints it unquoted (a quoted one doubles its quotes).
            return '%s=%s is not %s (%s), as role %s expects' % (name, _shown(value), expected, kind, role)
    choices = option.get('choices')
    # A list's choices are its elements' (as role argument validation checks them: parameters._validate_argument_values).
    refused = [item for item in (value if kind == 'list' else [value]) if item not in choices] if choices else []
    takes = ', '.join(str(c) for c in choices or [])
    if refused and kind == 'list':
        return '%s=%s has %s, which role %s does not take (%s)' % (name, _shown(value), ', '.join(_shown(i) for i in refused), role, takes)
    if refused:
        return '%s=%s is not one that role %s takes (%s)' % (name, _shown(value), role, takes)
    return None


def role_variable_errors(variables: Any) -> list[str]:
    """One line per role variable of ``variables`` (a node's hostvars, or any mapping) whose value its
    role's argument spec refuses, in the roles' and their options' order."""
    if not hasattr(variables, 'keys'):
        raise AnsibleFilterError('role_variable_errors: expected a mapping of variables (hostvars[inventory_hostname])')
    errors: list[str] = []
    for name in role_options():
        if name not in variables:
            continue
        try:
            value = variables[name]
        except AnsibleError as exc:
            # A template in the value that cannot be rendered: said as one line too.
            errors.append('%s cannot be rendered (%s)' % (name, printable(' '.join(str(exc).split()))[:200]))
            continue
        error = variable_error(name, value)
        if error:
            errors.append(error)
    # No role reads gpu_fabric_expected (the report does): its shape is checked here all the same, in every run.
    if EXPECTED in variables:
        try:
            errors.extend(printable(error) for error in expected_errors(variables[EXPECTED]))
        except AnsibleError as exc:
            errors.append('%s cannot be rendered (%s)' % (EXPECTED, printable(' '.join(str(exc).split()))[:200]))
    return errors


class FilterModule(object):

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            'role_variable_errors': role_variable_errors,
        }
