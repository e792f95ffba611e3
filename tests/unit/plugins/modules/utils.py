# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Run a module's main() in-process and capture exit_json / fail_json."""

from __future__ import annotations

import contextlib
import json

import pytest

from ansible.module_utils import basic

try:  # ansible-core >= 2.19
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # older ansible-core reads the serialised arguments from basic._ANSIBLE_ARGS
    @contextlib.contextmanager
    def patch_module_args(args):
        saved = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode()
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = saved


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super(ModuleExit, self).__init__(result)
        self.result = result
        self.failed = failed


def run_module(main, args, monkeypatch):
    """Return (result dict, failed bool) of running ``main`` with ``args``."""
    warnings = []

    def exit_json(self, **kwargs):
        kwargs['warnings'] = list(warnings)
        raise ModuleExit(kwargs, False)

    def fail_json(self, msg, **kwargs):
        kwargs['msg'] = msg
        raise ModuleExit(kwargs, True)

    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    with patch_module_args(args):
        with pytest.raises(ModuleExit) as caught:
            main()
    return caught.value.result, caught.value.failed
