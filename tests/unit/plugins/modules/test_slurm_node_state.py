# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""slurm_node_state with a stand-in scontrol that prints the lab's real output (tests/fixtures/real/slurm-lab) and
logs its arguments: argument lists only, check mode runs no update, and a refusal or an unusable scontrol is said.
The real Slurm runs in tests/functional/test_quarantine_slurm.py."""

from __future__ import annotations

import os
import stat

from ansible_collections.hpc.gpu_fabric.plugins.modules import slurm_node_state
from tests.unit.conftest import fixture_path
from tests.unit.plugins.modules.utils import run_module

ERR = {'status': 'error', 'reason': 'gpu_fabric: IB_PORT_DOWN mlx5_0/1', 'finding': 'IB_PORT_DOWN@n4/mlx5_0/1', 'stages': ['facts']}


def fake_scontrol(tmp_path, update_rc=0, show_rc=0, show=None):
    """A scontrol that prints ``show`` (default: the lab's real -o output) and logs each call's arguments."""
    listing = show if show is not None else fixture_path('real', 'slurm-lab', 'scontrol_show_node_o_22_05.txt')
    log = str(tmp_path / 'calls')
    path = str(tmp_path / 'scontrol')
    with open(path, 'w') as handle:
        handle.write('#!/bin/sh\nfor a in "$@"; do printf "%%s|" "$a" >> %s; done; echo >> %s\n'
                     'case "$1" in show) grep -v "^## " %s; exit %d;; update) echo "slurm_update error: Invalid node name" >&2; exit %d;; esac\n'
                     % (log, log, listing, show_rc, update_rc))
    os.chmod(path, stat.S_IRWXU)
    return path, log


def calls(log):
    with open(log) as handle:
        return [line.rstrip('|\n').split('|') for line in handle]


def test_check_mode_runs_no_update(tmp_path, monkeypatch):
    scontrol, log = fake_scontrol(tmp_path)
    # n4 of the lab is DOWN with NHC's reason: left alone; n1 is ours and not in the verdicts: kept.
    result, failed = run_module(slurm_node_state.main, {'verdicts': {'n4': ERR}, 'scontrol': scontrol, '_ansible_check_mode': True}, monkeypatch)
    assert not failed and result['changed'] is False
    assert {e['node']: e['outcome'] for e in result['nodes']} == {'n1': 'kept', 'n3': 'kept', 'n4': 'untouched'}
    assert calls(log) == [['show', 'node', '-o']]


def test_refused_update_is_said_and_fails(tmp_path, monkeypatch):
    show = str(tmp_path / 'listing')
    with open(show, 'w') as handle:
        handle.write('NodeName=n9 State=IDLE ThreadsPerCore=1\n')
    scontrol, log = fake_scontrol(tmp_path, update_rc=1, show=show)
    result, failed = run_module(slurm_node_state.main, {'verdicts': {'n9': ERR}, 'scontrol': scontrol}, monkeypatch)
    assert failed and 'scontrol refused: drain n9: slurm_update error: Invalid node name' in result['msg']
    assert calls(log)[1] == ['update', 'nodename=n9', 'state=DRAIN', 'reason=gpu_fabric: IB_PORT_DOWN mlx5_0/1']


def test_unusable_scontrol(tmp_path, monkeypatch):
    scontrol, _log = fake_scontrol(tmp_path, show_rc=1)
    result, failed = run_module(slurm_node_state.main, {'verdicts': {}, 'scontrol': scontrol}, monkeypatch)
    assert failed and result['msg'].startswith('scontrol show node -o failed (exit 1)')
    result, failed = run_module(slurm_node_state.main, {'verdicts': {}, 'scontrol': 'no-such-scontrol'}, monkeypatch)
    assert failed and result['msg'] == 'no-such-scontrol not found on PATH: this host is no Slurm client'
    result, failed = run_module(slurm_node_state.main, {'verdicts': {}, 'scontrol': scontrol, 'quarantine_max': 1.5}, monkeypatch)
    assert failed and 'above 0 and at most 1' in result['msg']
