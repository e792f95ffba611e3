# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The mlnx_qos and dcb stand-ins (tests/sim/tools_qos.py) print the real tools' formats."""

from __future__ import annotations

import os
import subprocess

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _roce
from tests.sim import render, tools_qos

FIXTURES = os.path.join(os.path.dirname(__file__), '..', 'fixtures', 'public')
BIN = os.path.join(os.path.dirname(__file__), '..', 'sim', 'bin')


def _fixture_lines(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return [line.rstrip('\n') for line in handle if not line.startswith('## ')]


def _root(tmp_path):
    root = str(tmp_path / 'node')
    render.render(render.load_profile('amd_mi300x_roce'), root)
    return root


def test_mlnx_qos_is_the_netarbiter_printout(tmp_path):
    root = _root(tmp_path)
    # The netarbiter node's state: all TCs vendor (the printout), trust dscp, PFC on 3.
    state = tools_qos._load(root, 'ens10f0np0')
    state['tc_tsa'] = dict((str(tc), 'vendor') for tc in range(8))
    tools_qos._save(root, 'ens10f0np0', state)
    rc, out, _err = tools_qos.answer(root, ['mlnx_qos', '-i', 'ens10f0np0'])
    assert rc == 0
    assert out.splitlines() == _fixture_lines('mlnx_qos', 'netarbiter_cx_pfc_prio3_dscp_trust.txt')


def test_dcb_pfc_is_the_man_page_layout(tmp_path):
    root = _root(tmp_path)
    rc, _out, _err = tools_qos.answer(root, ['dcb', 'pfc', 'set', 'dev', 'ens10f0np0', 'prio-pfc', 'all:off', '6:on', '7:on'])
    assert rc == 0
    rc, out, _err = tools_qos.answer(root, ['dcb', 'pfc', 'show', 'dev', 'ens10f0np0'])
    man = _fixture_lines('dcb', 'man7_dcb_pfc_show_prio67.txt')
    assert out.splitlines()[1] == man[1] and out.splitlines()[0].split()[:4] == man[0].split()[:4]


def test_dcb_app_names_and_numbers(tmp_path):
    root = _root(tmp_path)
    assert tools_qos.answer(root, ['dcb', 'app', 'replace', 'dev', 'ens10f0np0', 'dscp-prio', 'AF31:4'])[0] == 0
    assert tools_qos.answer(root, ['dcb', 'app', 'show', 'dev', 'ens10f0np0'])[1] == 'dscp-prio AF31:4\n'
    assert tools_qos.answer(root, ['dcb', '-N', 'app', 'show', 'dev', 'ens10f0np0'])[1] == 'dscp-prio 26:4\n'


def test_errors_like_the_tools(tmp_path):
    root = _root(tmp_path)
    assert tools_qos.answer(root, ['mlnx_qos', '-i', 'nope0'])[0] == 1
    assert tools_qos.answer(root, ['mlnx_qos', '-i', 'ens10f0np0', '--trust', 'x'])[0] == 2
    assert tools_qos.answer(root, ['dcb', 'pfc', 'show', 'dev', 'nope0'])[2] == 'Device "nope0" does not exist.\n'
    # No DCB on an IPoIB netdev.
    ib = str(tmp_path / 'ib')
    render.render(render.load_profile('homelab_cx4'), ib)
    assert tools_qos.answer(ib, ['mlnx_qos', '-i', 'ib0'])[0] == 1


def test_stand_in_scripts_run(tmp_path):
    root = _root(tmp_path)
    env = dict(os.environ, GF_SIM_ROOT=root)
    done = subprocess.run([os.path.join(BIN, 'mlnx_qos'), '-i', 'ens11f0np0', '--pfc', '0,0,0,0,1,0,0,0'],
                          env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and _roce.parse_mlnx_qos(done.stdout)['pfc'] == [4]
    done = subprocess.run([os.path.join(BIN, 'dcb'), 'pfc', 'show', 'dev', 'ens11f0np0'], env=env,
                          capture_output=True, text=True, check=False)
    assert _roce.parse_dcb_pfc(done.stdout) == [4]
    unset = subprocess.run([os.path.join(BIN, 'dcb')], env=dict(os.environ, GF_SIM_ROOT=''), capture_output=True, text=True,
                           check=False)
    assert unset.returncode == 1 and 'GF_SIM_ROOT' in unset.stderr
