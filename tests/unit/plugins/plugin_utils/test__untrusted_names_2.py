# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Names and values from untrusted input on the controller and in what the roles write (issue 25
items 6 and 7): a name in a generated boot script, C0 controls in report.html, an imported log's
file name on the console, arguments as strings (interval=NaN, beacon_port=70000)."""

from __future__ import annotations

import re
import subprocess

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _pci, _roce
from ansible_collections.hpc.gpu_fabric.plugins.modules import ib_fabric_facts, perftest_watch
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _boot_script
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _offline
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _html
from tests.unit.plugins.modules.utils import run_module

HOSTILE = "eth0\ntouch /tmp/gpu_fabric_pwned; x='"


def _outside_quotes(script):
    """What sh runs of the script: comments and quoted strings taken out, left to right as sh
    reads them (a quote inside a comment is no quote; shlex.quote writes a ' as '"'"')."""
    return re.sub(r'#[^\n]*|' + r"'[^']*'|" + r'"(?:[^"\\]|\\.)*"', '', script)


def test_roce_boot_script_keeps_a_hostile_name_in_its_quotes(tmp_path):
    # The role's script is the module's boot plan rendered by the boot_script filter (test__boot_script.py).
    ports = [{'netdev': HOSTILE, 'hca': 'mlx5_0\nreboot', 'port': 1, 'source': 'mlnx_qos'},
             {'netdev': 'eth1', 'hca': 'mlx5_1', 'port': 1, 'source': 'dcb'}]
    want = {'trust': 'dscp', 'priority': 3, 'dscp': 26, 'ecn': True, 'cnp_dscp': 48, 'cnp_priority': 6, 'tos': 106}
    script = _boot_script.render(_roce.boot_steps(ports, want))
    assert 'touch' not in _outside_quotes(script) and 'reboot' not in _outside_quotes(script)
    assert 'dcb apptrust set dev eth1 order dscp >/dev/null || status=1' in script
    # No name went into a comment line.
    assert not [line for line in script.splitlines() if line.startswith('#') and ('eth' in line or 'mlx5' in line)]
    # sh reads it as a script (no syntax error from a quote the name carried).
    path = tmp_path / 'roce-qos.sh'
    path.write_text(script)
    assert subprocess.run(['sh', '-n', str(path)], check=False).returncode == 0


def test_acs_boot_script_quotes_the_addresses(tmp_path):
    plan = [{'argv': _pci.setpci_acs_argv(bdf, 0, 28)} for bdf in ('0000:17:00.0', '0000:18:00.0\nreboot')]
    script = _boot_script.render(plan)
    assert 'setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000:001c >/dev/null || status=1' in script
    assert 'reboot' not in _outside_quotes(script)
    path = tmp_path / 'acs.sh'
    path.write_text(script)
    assert subprocess.run(['sh', '-n', str(path)], check=False).returncode == 0


def test_html_shows_c0_controls_visibly():
    text = _html._e('n1\x1b[2J\x07<b>\x00\tx\ny\x7f')
    assert text == 'n1\\x1b[2J\\x07&lt;b&gt;\\x00\tx\ny\\x7f'
    assert not re.search('[\x00-\x08\x0b-\x1f\x7f]', text)


def test_imported_log_names_are_printable_on_the_console():
    kinds = _offline.classify(['/logs/a__b__0__host.txt', '/logs/\x1b]0;owned\x07run\udcff.log', '/logs/fine.log'])
    assert kinds['labels'] == {'/logs/a__b__0__host.txt': 'a__b__0__host.txt', '/logs/\x1b]0;owned\x07run\udcff.log':
                               '\\x1b]0;owned\\x07run\\udcff.log', '/logs/fine.log': 'fine.log'}
    assert _offline.printable('\u2028\x9b[1m\u00e9') == '\\u2028\\x9b[1m\u00e9'


@pytest.mark.parametrize('interval', ['nan', 'inf', '-inf', '-1', '3601'])
def test_ib_fabric_facts_refuses_an_interval_out_of_bounds(tmp_path, monkeypatch, interval):
    result, failed = run_module(ib_fabric_facts.main, {'root': str(tmp_path), 'interval': interval}, monkeypatch)
    assert failed and result['msg'].startswith('interval must be a number of seconds from 0 (one read) to 3600')


def test_ib_fabric_facts_interval_bounds():
    assert ib_fabric_facts.params_problem({'interval': 0.0, 'timeout': 1}) is None
    assert ib_fabric_facts.params_problem({'interval': 3600.0, 'timeout': 120}) is None
    assert 'timeout' in ib_fabric_facts.params_problem({'interval': 5.0, 'timeout': 0})


@pytest.mark.parametrize('port', ['70000', '0', '-1', '65536'])
def test_perftest_watch_refuses_a_port_out_of_range(monkeypatch, port):
    result, failed = run_module(perftest_watch.main, {'step': 1, 'address': '127.0.0.1', 'beacon_port': port, 'run_id': 'r'},
                                monkeypatch)
    assert failed and result['msg'] == 'beacon_port must be a TCP port, 1 to 65535 (got %d)' % int(port)
