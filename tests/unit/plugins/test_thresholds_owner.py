# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Thresholds live next to the rule that uses them; the roles leave them to it (null)."""

from __future__ import annotations

import os

import yaml

from ansible_collections.hpc.gpu_fabric.plugins.filter.collective import collective_verdict
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE_THRESHOLDS = {'fabric_bench': ('fabric_bench_bw_ratio', 'fabric_bench_gpu_ratio', 'fabric_bench_lat_max_us'),
                   'fabric_collective': ('fabric_collective_healthy_ratio', 'fabric_collective_warn_ratio')}


def _yaml(*parts):
    with open(os.path.join(REPO, *parts), encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def test_roles_leave_the_thresholds_to_the_rules():
    for role, names in ROLE_THRESHOLDS.items():
        defaults = _yaml('roles', role, 'defaults', 'main.yml')
        options = _yaml('roles', role, 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
        for name in names:
            assert defaults[name] is None and options[name]['default'] is None, name


def test_left_out_or_null_is_the_rule_default():
    assert _bench.thresholds({'bw_ratio': None}) == {'bw_ratio': _bench.BW_RATIO, 'gpu_ratio': _bench.GPU_RATIO,
                                                     'lat_max_us': _bench.LAT_MAX_US}
    assert _bench.report({}, {})['thresholds'] == {'bw_ratio': _bench.BW_RATIO, 'gpu_ratio': _bench.GPU_RATIO,
                                                   'lat_max_us': _bench.LAT_MAX_US}
    verdict = collective_verdict({'status': 'ok', 'max_busbw_gbs': 40.0}, 50.0, None, None)
    assert (verdict['healthy_ratio'], verdict['warn_ratio']) == (_collective.HEALTHY_RATIO, _collective.WARN_RATIO)
