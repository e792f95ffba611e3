# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The nccl-tests stand-in over one node's GPUs follows NCCL's settings from the environment and the node's
configuration files (tests/sim/tools_nccl.py), prints them as NCCL's ENV lines, and slows down as the real
2 x H200 runs did (tests/fixtures/real/h200x2/state/README.md)."""

from __future__ import annotations

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _nccl
from tests.bench import _accuracy_nccl_settings as acc
from tests.sim import render, tools_nccl


def _avg(tmp_path, env, conf):
    root = str(tmp_path / 'node')
    render.render(render.load_profile(acc.PROFILE), root)
    render.render_nccl_conf(root, {'nccl_conf': conf})
    return acc._run(root, 'nodeB', dict(acc.BASE_ENV, **env))  # pylint: disable=protected-access


# Avg bus bandwidth of the real runs against the healthy 79.36 GB/s.
@pytest.mark.parametrize('env, conf, printed, ratio', [
    ({'NCCL_MAX_NCHANNELS': '1'}, {}, {'NCCL_MAX_NCHANNELS': '1'}, 8.21 / 79.36),
    ({}, {'/etc/nccl.conf': {'NCCL_BUFFSIZE': '262144'}}, {'NCCL_BUFFSIZE': '262144'}, 66.12 / 79.36),
    ({}, {'~/.nccl.conf': {'NCCL_PROTO': 'Simple', 'NCCL_NTHREADS': '64'}}, {'NCCL_PROTO': 'Simple', 'NCCL_NTHREADS': '64'}, 39.18 / 79.36),
    ({'NCCL_CONF_FILE': '/tmp/my.conf'}, {'/tmp/my.conf': {'NCCL_MAX_NCHANNELS': '2', 'NCCL_ALGO': 'Ring'},
                                          '~/.nccl.conf': {'NCCL_PROTO': 'LL'}},
     {'NCCL_MAX_NCHANNELS': '2', 'NCCL_ALGO': 'Ring'}, 15.53 / 79.36),
    # The environment wins over the file.
    ({'NCCL_BUFFSIZE': '65536'}, {'/etc/nccl.conf': {'NCCL_BUFFSIZE': '262144'}}, {'NCCL_BUFFSIZE': '65536'}, 34.33 / 79.36),
])
def test_settings_from_the_environment_and_the_files(tmp_path, env, conf, printed, ratio):
    healthy = _avg(tmp_path / 'a', {}, {})
    tuned = _avg(tmp_path / 'b', env, conf)
    assert tuned['transport']['env'] == dict(acc.BASE_ENV, **printed)
    assert tuned['avg_busbw_gbs'] / healthy['avg_busbw_gbs'] == pytest.approx(ratio, rel=0.01)
    assert healthy['transport']['env'] == acc.BASE_ENV


def test_the_env_lines_are_the_real_ones():
    lines = list(tools_nccl.env_lines({'NCCL_ALGO': 'Ring', 'NCCL_MAX_NCHANNELS': '2', 'GF_SIM_X': '1'}))
    assert lines == ['NCCL_ALGO set by environment to Ring', 'NCCL_MAX_NCHANNELS set by environment to 2.']
    with open('tests/fixtures/real/h200x2/state/nccl_conffile.txt') as handle:
        real = handle.read()
    assert all(line in real for line in lines)
    parsed = _nccl.parse_text(real)
    assert parsed['transport']['env']['NCCL_ALGO'] == 'Ring'


def test_the_accuracy_cases_of_the_nccl_settings():
    # tests/bench/diagnosis_accuracy.py reports the same under 'nccl_settings'.
    result = acc.run()
    assert (result['right'], result['false_positives'], result['misattributed']) == (result['total'], 0, 0), result['cases']
    assert result['total'] == len(acc.CASES) >= 9
