# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every filter has its own documentation, and it describes the function that runs.

ansible-doc reads a filter's DOCUMENTATION from the .py that provides it, or, when that file has
none, from plugins/filter/<name>.yml (ansible.utils.plugin_docs.find_plugin_docfile and
_find_adjacent). A file that holds several filters must therefore have no DOCUMENTATION, or every
filter in it would show the first one's.
"""

from __future__ import annotations

import glob
import importlib
import inspect
import os

import pytest
import yaml

from ansible_collections.hpc.gpu_fabric.plugins.filter import report as _any_filter

FILTER_DIR = os.path.dirname(_any_filter.__file__)
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(FILTER_DIR, '*.py')) if not p.endswith('__init__.py'))


def _filters():
    for name in MODULES:
        module = importlib.import_module('ansible_collections.hpc.gpu_fabric.plugins.filter.%s' % name)
        for filter_name, function in sorted(module.FilterModule().filters().items()):
            yield module, filter_name, function


FILTERS = list(_filters())


def _documentation(module, filter_name):
    sidecar = os.path.join(FILTER_DIR, '%s.yml' % filter_name)
    if getattr(module, 'DOCUMENTATION', None):
        assert len(module.FilterModule().filters()) == 1, '%s: several filters, so the docs belong in <name>.yml' % module.__name__
        assert not os.path.exists(sidecar), sidecar
        return yaml.safe_load(module.DOCUMENTATION), module.EXAMPLES, yaml.safe_load(module.RETURN)
    with open(sidecar) as handle:
        doc = yaml.safe_load(handle)
    return doc['DOCUMENTATION'], doc['EXAMPLES'], doc['RETURN']


def test_every_sidecar_names_a_filter():
    names = set(filter_name for _module, filter_name, _function in FILTERS)
    sidecars = set(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(FILTER_DIR, '*.yml')))
    assert sidecars <= names
    assert len(names) == len(FILTERS)


@pytest.mark.parametrize('module, filter_name, function', FILTERS, ids=[f[1] for f in FILTERS])
def test_documentation_describes_the_function(module, filter_name, function):
    documentation, examples, returns = _documentation(module, filter_name)
    assert documentation['name'] == filter_name
    assert documentation['short_description'] and documentation['description']
    assert 'hpc.gpu_fabric.%s' % filter_name in examples
    assert returns['_value']['description']
    options = dict(documentation['options'])
    assert '_input' in options and options['_input'].get('required')
    parameters = inspect.signature(function).parameters
    names = list(parameters)[1:]
    # Every documented option is a parameter, and every required parameter is documented.
    assert set(options) - {'_input'} <= set(names), filter_name
    required = [n for n in names if parameters[n].default is inspect.Parameter.empty]
    assert set(required) <= set(options), filter_name
    for name, option in options.items():
        if name != '_input' and 'default' in option:
            default = parameters[name].default
            # 'options=None' used as 'options or {}': the documented default is the empty one.
            assert option['default'] == default or (default is None and option['default'] in ({}, [])), (filter_name, name)
    if 'positional' in documentation:
        positional = [p.strip() for p in documentation['positional'].split(',')]
        assert positional == ['_input'] + names[:len(positional) - 1], filter_name
