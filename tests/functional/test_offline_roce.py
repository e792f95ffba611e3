# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""RoCE nodes judged offline: capture.yml saves the DCB tools' outputs (mlnx_qos, dcb) of
every RoCE port with the ECN and configfs files, and offline.yml - given only the tarballs -
reads them back (roce_qos_facts from_log), so that a snapshot gets the verdicts the live node
would: ROCE_PFC_OFF where PFC is off, ROCE_DCBX_MISMATCH where lldpad is willing (from lldptool's saved
output), nothing on the healthy node, and ROCE_QOS_UNKNOWN on none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = {'nodes': [
    {'name': 'r1', 'profile': 'amd_mi300x_roce'},
    {'name': 'r2', 'profile': 'amd_mi300x_roce', 'faults': ['roce_pfc_off']},
    # lldpad willing on the node: the switch manages what roce_qos set (ROCE_DCBX_MISMATCH), judged from lldptool's saved output.
    {'name': 'r3', 'profile': 'amd_mi300x_roce', 'faults': ['dcbx_willing_host']},
]}


def playbook(name, *args):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, name)] + list(args)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)


def test_roce_snapshots_are_judged_offline(tmp_path):
    dest = str(tmp_path)
    snapshots, out = os.path.join(dest, 'snapshots'), os.path.join(dest, 'report')
    cluster.build(SPEC, dest, 'local', python=sys.executable)
    captured = playbook('playbooks/capture.yml', '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes',
                        '-e', 'gpu_fabric_output_dir=' + snapshots)
    assert captured.returncode == 0, captured.stdout[-3000:] + captured.stderr[-3000:]
    assert all(stats['failed'] == 0 for stats in recap(captured).values())
    # Each snapshot holds one mlnx_qos output per RoCE port (the stand-in answers: dcb is not needed) and
    # lldptool's (failed: no lldpad on r2; both TLVs, willing, on r3).
    with tarfile.open(os.path.join(snapshots, 'r2.tar.gz')) as tar:
        saved = sorted(n for n in tar.getnames() if n.startswith('.gpu_fabric_commands/roce_qos/'))
        assert len(saved) == 16 and sorted(set(n.split('.', 2)[-1] for n in saved)) == ['lldptool_pfc.txt', 'mlnx_qos.txt']
        text = tar.extractfile([n for n in saved if n.endswith('.mlnx_qos.txt')][0]).read().decode()
        lldp = tar.extractfile([n for n in saved if n.endswith('.lldptool_pfc.txt')][0]).read().decode()
    assert '# rc: 0\n' in text and 'PFC configuration:' in text and 'enabled     0   0   0   0   0   0   0   0' in text
    assert '# rc: 1\n' in lldp
    with tarfile.open(os.path.join(snapshots, 'r3.tar.gz')) as tar:
        saved = sorted(n for n in tar.getnames() if n.endswith('.lldptool_ets.txt'))
        assert len(saved) == 8 and 'Willing: yes' in tar.extractfile(saved[0]).read().decode()

    # Nothing but the tarballs is left: no stand-in can answer for a node now.
    shutil.rmtree(os.path.join(dest, 'roots'))
    offline = playbook('playbooks/offline.yml', '-e', 'gpu_fabric_snapshots=' + snapshots, '-e', 'gpu_fabric_output_dir=' + out,
                       '-e', 'roce_qos_dcbx=host')
    # The run ends failed by the exit policy (a root-cause error), and only by it.
    assert offline.returncode == 2, offline.stdout[-4000:] + offline.stderr[-3000:]
    stats = recap(offline)
    assert stats['r1']['failed'] == stats['r2']['failed'] == stats['r3']['failed'] == 0 and stats['localhost']['failed'] == 1
    assert "exit policy (default: any root-cause error) matched: ROCE_PFC_OFF@r2/all RoCE ports" in offline.stdout
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    codes = dict((host, set(f['code'] for f in report['findings'] if f['host'] == host)) for host in ('r1', 'r2', 'r3'))
    assert 'ROCE_QOS_UNKNOWN' not in codes['r1'] | codes['r2'] | codes['r3']
    assert [f['host'] for f in report['findings'] if f['code'] == 'ROCE_DCBX_MISMATCH'] == ['r3']
    assert 'ROCE_PFC_OFF' in codes['r2']
    assert not any(code.startswith('ROCE_') for code in codes['r1']), codes['r1']
    pfc_off = [f for f in report['findings'] if f['code'] == 'ROCE_PFC_OFF']
    assert [f['host'] for f in pfc_off] == ['r2'] and pfc_off[0]['explained_by'] is None
