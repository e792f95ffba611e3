# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""perftest_watch: where a sequence's beacon is, waiting past a step, the timeout, a beacon
that never comes, check mode, and arguments refused before anything is probed."""

from __future__ import annotations

import socket
import threading

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _sequence
from ansible_collections.hpc.gpu_fabric.plugins.modules import perftest_watch
from tests.unit.plugins.modules.utils import run_module

ADDRESS = '127.0.0.1'


def _free_port():
    sock = socket.socket()
    sock.bind((ADDRESS, 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
def beacon():
    """A sequence's beacon at step 3 on a free port, answered from a thread."""
    port = _free_port()
    served = _sequence.Beacon(ADDRESS, port, 'run-1')
    served.step = 3
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            served.wait(0.01)

    thread = threading.Thread(target=loop)
    thread.start()
    yield port
    stop.set()
    thread.join()
    served.close()


def test_returns_once_the_beacon_is_past_the_step(monkeypatch, beacon):
    result, failed = run_module(perftest_watch.main, {'step': 2, 'address': ADDRESS, 'beacon_port': beacon, 'run_id': 'run-1'},
                                monkeypatch)
    assert not failed and result['changed'] is False
    assert dict(result['progress'], waited_s=None) == {'step': 3, 'finished': False, 'gone': False, 'timed_out': False, 'waited_s': None}


def test_a_beacon_still_at_the_step_times_out(monkeypatch, beacon):
    result, failed = run_module(perftest_watch.main, {'step': 3, 'address': ADDRESS, 'beacon_port': beacon, 'run_id': 'run-1',
                                                      'timeout': 1}, monkeypatch)
    assert not failed
    assert result['progress']['timed_out'] is True and result['progress']['step'] == 3 and result['progress']['waited_s'] >= 1


def test_a_beacon_of_another_run_does_not_count(monkeypatch, beacon):
    result, failed = run_module(perftest_watch.main, {'step': 1, 'address': ADDRESS, 'beacon_port': beacon, 'run_id': 'run-2',
                                                      'timeout': 5, 'start_grace': 1}, monkeypatch)
    assert not failed
    assert result['progress']['gone'] is True and result['progress']['step'] is None


def test_check_mode_follows_nothing(monkeypatch):
    result, failed = run_module(perftest_watch.main, {'step': 1, 'address': ADDRESS, 'beacon_port': _free_port(), 'run_id': 'r',
                                                      '_ansible_check_mode': True}, monkeypatch)
    assert not failed and result['skipped'] is True and 'progress' not in result


@pytest.mark.parametrize('args, message', [
    ({'step': 0}, 'step must be a positive integer'),
    ({'run_id': ''}, 'run_id must not be empty'),
    ({'address': '-oProxyCommand=x'}, "address: '-oProxyCommand=x' is not a host name"),
    ({'run_id': 'a\0b'}, 'run_id: '),
])
def test_bad_arguments_fail_before_anything_is_probed(monkeypatch, args, message):
    monkeypatch.setattr(_sequence, 'watch', lambda *a, **k: pytest.fail('probed despite bad arguments'))
    result, failed = run_module(perftest_watch.main, dict({'step': 1, 'address': ADDRESS, 'run_id': 'r'}, **args), monkeypatch)
    assert failed and result['msg'].startswith(message), result['msg']
