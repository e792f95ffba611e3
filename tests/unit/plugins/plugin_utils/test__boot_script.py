# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Boot scripts run the steps the modules planned (issue 23): roce_qos and acs_disable return a
``boot_plan`` from the plan they apply now, and one renderer (plugin_utils/_boot_script.py, filter
``boot_script``) writes it as sh. Each rendered script is run here with stand-in tools on PATH that
record their argv, and its files below a temporary directory: what ran is what was planned."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

import jinja2
import pytest

from ansible_collections.hpc.gpu_fabric.plugins.filter.boot_script import boot_script
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _pci, _roce
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.modules import acs_disable, roce_qos
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _boot_script
from tests.sim import cluster, faults, render, tools_qos
from tests.unit.plugins.modules.utils import run_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
WANT = {'trust': 'dscp', 'priority': 3, 'dscp': 26, 'ecn': True, 'cnp_dscp': 48, 'cnp_priority': 6, 'tos': 106}
HOSTILE = ["eth0\ntouch PWNED; x='", '$(touch PWNED)', '`touch PWNED`', "it's", 'a b', '-x', '', '*', ';', '"$HOME"']
RECORDER = '''#!%s
import json, os, sys
name = os.path.basename(sys.argv[0])
with open(os.environ['RECORD'], 'a') as handle:
    handle.write(json.dumps([name] + sys.argv[1:]) + '\\n')
print('what %%s prints goes to /dev/null' %% name)
sys.exit(int(os.environ.get('RC_' + name, '0')))
'''


def _tools(tmp_path, *names):
    """A directory of stand-ins for ``names`` that record their argv as JSON lines."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        path = bin_dir / name
        path.write_text(RECORDER % sys.executable)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(bin_dir)


def _run(tmp_path, body, tools, **rcs):
    """(rc, recorded argv lists, stderr) of the script ``body`` run by sh with ``tools`` on PATH."""
    script = tmp_path / 'script.sh'
    script.write_text('#!/bin/sh\n' + body)
    assert subprocess.run(['sh', '-n', str(script)], check=False).returncode == 0
    record = tmp_path / 'record.jsonl'
    if record.exists():
        record.unlink()
    env = dict(os.environ, PATH=tools + ':/usr/bin:/bin', RECORD=str(record), **dict(('RC_' + k, str(v)) for k, v in rcs.items()))
    done = subprocess.run(['sh', str(script)], cwd=str(tmp_path), env=env, capture_output=True, text=True, check=False)
    assert done.stdout == ''       # the tools' stdout is dropped
    ran = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return done.returncode, ran, done.stderr


def _relocated(plan, prefix):
    """``plan`` with its files and directories below ``prefix`` (a test cannot write /sys)."""
    moved = []
    for step in plan:
        step = dict(step)
        for key in ('write', 'mkdir'):
            if key in step:
                step[key] = prefix + step[key]
        moved.append(step)
    return moved


def _outside_quotes(script):
    """What sh runs of the script: comments and single-quoted strings taken out (shlex.quote writes
    a ' as '"'"', whose double-quoted part is taken out too)."""
    return re.sub(r'#[^\n]*|' + r"'[^']*'|" + r'"(?:[^"\\]|\\.)*"', '', script)


# ---------------------------------------------------------------------------- the renderer

def test_hostile_words_stay_inert_and_every_step_runs_as_planned(tmp_path):
    odd = str(tmp_path / "dir with 'quote' $(touch PWNED)\nand a newline")
    os.makedirs(odd)
    present = odd + '/present'
    with open(present, 'w') as handle:
        handle.write('0\n')
    plan = [
        {'argv': ['tool'] + HOSTILE},
        {'argv': ['failing', 'x']},                                     # fails: the rest still runs
        {'write': present, 'value': HOSTILE[0], 'skip_if_absent': True},
        {'write': odd + '/absent', 'value': '1', 'skip_if_absent': True},
        {'mkdir': odd + '/made $(x)'},
        {'mkdir': odd + '/made $(x)'},                                  # already there: no error
        {'write': odd + '/made $(x)/new', 'value': '106', 'skip_if_absent': False},
        {'argv': ['tool', 'last']},
    ]
    body = _boot_script.render(plan)
    assert body.startswith('# Every step runs') and body.endswith('exit $status\n')
    assert 'PWNED' not in _outside_quotes(body)
    comments = [line for line in body.splitlines() if line.startswith('#')]
    assert comments == [_boot_script.HEADER[0]]                         # nothing of the plan in a comment
    rc, ran, err = _run(tmp_path, body, _tools(tmp_path, 'tool', 'failing'), failing=3)
    assert rc == 1, err
    assert ran == [step['argv'] for step in plan if 'argv' in step]
    assert not os.path.exists(str(tmp_path / 'PWNED')) and not os.path.exists(os.path.join(odd, 'PWNED'))
    with open(present) as handle:
        assert handle.read() == HOSTILE[0] + '\n'
    assert not os.path.exists(odd + '/absent')
    with open(odd + '/made $(x)/new') as handle:
        assert handle.read() == '106\n'
    # Without the failing tool's failure the script succeeds.
    assert _run(tmp_path, body, _tools(tmp_path, 'tool', 'failing'))[0] == 0


def test_a_write_that_fails_sets_the_status(tmp_path):
    body = _boot_script.render([{'write': str(tmp_path / 'no/such/dir/file'), 'value': '1', 'skip_if_absent': False},
                                {'mkdir': str(tmp_path / 'no/such/dir')}])
    rc, _ran, err = _run(tmp_path, body, _tools(tmp_path))
    assert rc == 1 and err


@pytest.mark.parametrize('plan, why', [
    ({'argv': ['x']}, 'a boot plan is a list'),
    ([{'argv': ['x', 'a\x00b']}], 'NUL byte'),
    ([{'argv': []}], 'non-empty list'),
    ([{'argv': 'reboot'}], 'non-empty list'),
    ([{'argv': ['x', 3]}], 'must be a string'),
    ([{'write': 'sys/x', 'value': '1'}], 'not an absolute path'),
    ([{'write': '/sys/x'}], 'needs its value'),
    ([{'write': '/sys/x', 'value': '1', 'skip_if_absent': 'yes'}], 'true or false'),
    ([{'mkdir': '/a', 'argv': ['x']}], 'exactly one of'),
    ([{'run': ['x']}], 'exactly one of'),
    ([{'argv': ['x'], 'when': 'boot'}], 'no key when'),
    (['reboot'], 'must be a mapping'),
])
def test_a_plan_it_cannot_write_faithfully_is_refused(plan, why):
    with pytest.raises(_boot_script.PlanError, match=why):
        _boot_script.render(plan)


def test_an_empty_plan_is_a_script_that_succeeds(tmp_path):
    assert _run(tmp_path, _boot_script.render([]), _tools(tmp_path)) == (0, [], '')


# ---------------------------------------------------------------------------- roce_qos

def _roce_node(tmp_path, *names):
    profile = render.load_profile('amd_mi300x_roce')
    for name in names:
        faults.apply(profile, name)
    root = str(tmp_path / 'node')
    render.render(profile, root)
    return root


def _ports(root, run):
    sysroot = SysRoot(root)
    return [p for p in _roce.read_roce(sysroot, read_ib(sysroot), run) if p['state'] == 'ACTIVE']


DRIFT = ('roce_trust_pcp', 'roce_pfc_off', 'roce_ecn_off', 'roce_cnp_lossy', 'roce_tos_default')


@pytest.mark.parametrize('tool', ['mlnx_qos', 'dcb'])
def test_the_boot_steps_hold_every_change_and_set_the_node_right(tmp_path, tool):
    root = _roce_node(tmp_path, *DRIFT)

    def run(argv):
        return None if tool == 'dcb' and argv[0] == 'mlnx_qos' else tools_qos.answer(root, argv)[:2]
    ports = _ports(root, run)
    assert set(p['source'] for p in ports) == {tool}
    steps = _roce.boot_steps(ports, WANT)
    # What the module changes now are some of these very steps, in the same order.
    changed = [step for port in ports for change in _roce.plan(port, WANT, tool) for step in change[3]]
    assert changed and [step for step in steps if step in changed] == changed
    # One port's boot steps: the DCB part with the tool that read it, then sysfs and configfs.
    first = _roce.boot_steps(ports[:1], WANT)
    assert steps[:len(first)] == first and len(steps) == len(first) * len(ports)
    dcb = [['mlnx_qos', '-i']] * 3 if tool == 'mlnx_qos' else [['dcb', 'apptrust'], ['dcb', 'pfc'], ['dcb', 'app']]
    assert [s['argv'][:2] for s in first if 'argv' in s] == dcb and all(ports[0]['netdev'] in s['argv'] for s in first if 'argv' in s)
    assert [s.get('skip_if_absent') for s in first if 'write' in s] == [True, True, True, True, False]
    assert {'mkdir': '/sys/kernel/config/rdma_cm/%s' % ports[0]['hca']} in first
    # Carried out on the drifted node, the boot steps leave nothing to change.
    where = SysRoot(root)
    for step in steps:
        assert _roce.apply_step(where, run, step) is None, step
    assert [c for port in _ports(root, run) for c in _roce.plan(port, WANT, tool)] == []


def test_the_rendered_roce_script_runs_the_planned_commands(tmp_path):
    root = _roce_node(tmp_path, *DRIFT)
    ports = _ports(root, lambda argv: tools_qos.answer(root, argv)[:2])
    plan = _relocated(_roce.boot_steps(ports, WANT), str(tmp_path / 'boot'))
    # At boot: the ecn/ files of the first port are there, the others' are not (no MLNX OFED ecn/);
    # configfs' rdma_cm is there and makes no ports/N here (the test makes them, as the kernel would).
    ecn = os.path.join(str(tmp_path), 'boot/sys/class/net/%s/ecn' % ports[0]['netdev'])
    for rel in ('roce_np/enable/3', 'roce_rp/enable/3', 'roce_np/cnp_dscp', 'roce_np/cnp_802p_prio'):
        os.makedirs(os.path.dirname(os.path.join(ecn, rel)), exist_ok=True)
        with open(os.path.join(ecn, rel), 'w') as handle:
            handle.write('0\n')
    for port in ports:
        os.makedirs(os.path.join(str(tmp_path), 'boot/sys/kernel/config/rdma_cm/%s/ports/%s' % (port['hca'], port['port'])))
    rc, ran, err = _run(tmp_path, _boot_script.render(plan), _tools(tmp_path, 'mlnx_qos', 'dcb'))
    assert rc == 0, err
    assert ran == [step['argv'] for step in plan if 'argv' in step] and len(ran) == 3 * len(ports)
    with open(os.path.join(ecn, 'roce_np/cnp_802p_prio')) as handle:
        assert handle.read() == '6\n'
    assert not os.path.exists(os.path.join(str(tmp_path), 'boot/sys/class/net/%s/ecn' % ports[1]['netdev']))
    for port in ports:
        with open(os.path.join(str(tmp_path), 'boot/sys/kernel/config/rdma_cm/%s/ports/%s/default_roce_tos' % (port['hca'], port['port']))) as handle:
            assert handle.read() == '106\n'
    # mlnx_qos gone at boot: its steps fail (no other tool is tried), the writes still run, the unit fails.
    os.unlink(os.path.join(ecn, 'roce_np/cnp_802p_prio'))
    (tmp_path / 'no-tools').mkdir()
    rc, ran, err = _run(tmp_path, _boot_script.render(plan), str(tmp_path / 'no-tools'))
    assert rc == 1 and ran == [] and 'mlnx_qos' in err
    assert not os.path.exists(os.path.join(ecn, 'roce_np/cnp_802p_prio'))       # absent at boot: skipped


def test_the_module_returns_its_boot_plan_in_check_mode_too(tmp_path, monkeypatch):
    root = _roce_node(tmp_path, *DRIFT)
    monkeypatch.setenv('PATH', cluster.SIM_BIN + ':' + os.environ['PATH'])
    monkeypatch.setenv('GF_SIM_ROOT', root)
    args = {'root': root, 'qos_tools': 'always', 'netdevs': ['ens10f0np0']}
    checked, failed = run_module(roce_qos.main, dict(args, _ansible_check_mode=True), monkeypatch)
    assert not failed and checked['changed'] and checked['ports'] == ['ens10f0np0'], checked
    applied, failed = run_module(roce_qos.main, args, monkeypatch)
    again, _failed = run_module(roce_qos.main, args, monkeypatch)
    assert not failed and applied['changed'] and not again['changed']
    # The same plan whatever the node's state: the script does not change once the node is right.
    assert checked['boot_plan'] == applied['boot_plan'] == again['boot_plan']
    assert checked['boot_plan'][0] == {'argv': ['mlnx_qos', '-i', 'ens10f0np0', '--trust', 'dscp']}
    assert all('ens10f0np0' in json.dumps(s) or 'rdma_cm/mlx5_0' in json.dumps(s) for s in checked['boot_plan'])


# ---------------------------------------------------------------------------- acs_disable

@pytest.fixture
def acs_node(tmp_path):
    profile = render.load_profile('metax_c500_cx7')
    context = faults.apply(profile, 'acs_enabled')
    root = str(tmp_path / 'root')
    render.render(profile, root)
    return root, context['bridge']


def _setpci(argv):
    """(bdf, value, mask) of a setpci_acs_argv command line."""
    match = re.match(r'ECAP_ACS\+0x6\.w=([0-9a-f]{4}):([0-9a-f]{4})\Z', argv[3])
    assert argv[:3] == ['setpci', '-s', argv[2]] and match, argv
    return argv[2], int(match.group(1), 16), int(match.group(2), 16)


def test_acs_boot_plan_writes_what_the_module_wrote(acs_node, monkeypatch):
    root, bridge = acs_node
    args = {'root': root, 'clear': ['ReqRedir', 'CmpltRedir', 'UpstreamFwd']}
    checked, failed = run_module(acs_disable.main, dict(args, _ansible_check_mode=True), monkeypatch)
    assert not failed
    # One setpci per bridge in scope, changed now or not, in the devices' order.
    assert [_setpci(s['argv'])[0] for s in checked['boot_plan']] == [d['pci_address'] for d in checked['devices']]
    assert bridge in [d['pci_address'] for d in checked['devices']]
    for step, device in zip(checked['boot_plan'], checked['devices']):
        _bdf, value, mask = _setpci(step['argv'])
        assert (value, mask) == (0, 0x1c)
        # setpci's VALUE:MASK on the register as it was gives what the module writes now.
        assert _pci.acs_ctl_after(device['before'], value, mask) == device['after']
    applied, failed = run_module(acs_disable.main, args, monkeypatch)
    assert not failed and applied['changed'] and applied['boot_plan'] == checked['boot_plan']
    again, _failed = run_module(acs_disable.main, args, monkeypatch)
    assert not again['changed'] and again['boot_plan'] == checked['boot_plan']
    restored, failed = run_module(acs_disable.main, {'root': root, 'restore': applied['previous']}, monkeypatch)
    assert not failed and [_setpci(s['argv'])[1:] for s in restored['boot_plan']] == [
        (applied['previous'][d['pci_address']], 0xffff) for d in restored['devices']]


def test_the_rendered_acs_script_runs_setpci_as_planned(acs_node, monkeypatch, tmp_path):
    root, _bridge = acs_node
    result, failed = run_module(acs_disable.main, {'root': root, '_ansible_check_mode': True}, monkeypatch)
    assert not failed and result['boot_plan']
    rc, ran, err = _run(tmp_path, _boot_script.render(result['boot_plan']), _tools(tmp_path, 'setpci'))
    assert rc == 0, err
    assert ran == [s['argv'] for s in result['boot_plan']]
    assert all(argv[3] == 'ECAP_ACS+0x6.w=0000:007f' for argv in ran)


# ---------------------------------------------------------------------------- the roles' templates

def _template(role, name, **variables):
    """A role's script template rendered by Jinja as the template module does (trim_blocks), with
    the collection's boot_script filter. (Ansible's templar resolves hpc.gpu_fabric.* names only
    where the collection loader was set up before the collection was first imported; ansible-playbook
    renders them in tests/functional.)"""
    with open(os.path.join(REPO, 'roles', role, 'templates', name)) as handle:
        source = handle.read()
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters['hpc.gpu_fabric.boot_script'] = boot_script
    return env.from_string(source).render(ansible_managed='Ansible managed', **variables)


def test_the_roce_template_is_the_rendered_plan(tmp_path):
    plan = [{'argv': ['mlnx_qos', '-i', HOSTILE[0], '--trust', 'dscp']},
            {'write': '/sys/class/net/%s/ecn/roce_np/enable/3' % HOSTILE[1], 'value': '1', 'skip_if_absent': True},
            {'mkdir': '/sys/kernel/config/rdma_cm/mlx5_0\nreboot'}]
    script = _template('roce_qos', 'roce-qos.sh.j2', __roce_qos_result={'boot_plan': plan})
    assert script.startswith('#!/bin/sh\n# Ansible managed\n')
    assert script.endswith(_boot_script.render(plan)) and script.endswith('exit $status\n')
    assert 'PWNED' not in _outside_quotes(script) and 'reboot' not in _outside_quotes(script)
    assert not [line for line in script.splitlines() if line.startswith('#') and ('eth' in line or 'mlx5' in line)]
    path = tmp_path / 'roce-qos.sh'
    path.write_text(script)
    assert subprocess.run(['sh', '-n', str(path)], check=False).returncode == 0


def test_the_acs_template_is_the_rendered_plan(tmp_path):
    plan = [{'argv': _pci.setpci_acs_argv('0000:17:00.0', 0, 0x1c)}, {'argv': _pci.setpci_acs_argv('0000:18:00.0\nreboot', 0, 0x7f)}]
    script = _template('pcie_acs', 'acs-disable.sh.j2', __pcie_acs_result={'boot_plan': plan})
    assert 'setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000:001c >/dev/null || status=1\n' in script
    assert script.endswith(_boot_script.render(plan)) and 'reboot' not in _outside_quotes(script)
    path = tmp_path / 'acs.sh'
    path.write_text(script)
    assert subprocess.run(['sh', '-n', str(path)], check=False).returncode == 0
