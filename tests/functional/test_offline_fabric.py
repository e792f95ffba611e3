# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fabric beyond the nodes through capture.yml and offline.yml: on the simulated fat tree
(tests/sim/fabric.py) with a switch port counting errors off every tested route (subnet_port_errors),
capture.yml saves the infiniband-diags outputs of the node that reads the fabric into its snapshot;
offline.yml, with the simulated fabric and the nodes gone, judges them (ib_fabric_facts from_log) and
names the same IB_SUBNET_ERRORS / FABRIC_* findings as the live run. A capture whose reading node has
no infiniband-diags saves why, and offline the fabric is not read (FABRIC_TOOLS_MISSING), never ok.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile

import yaml

from tests.sim import fabric

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAVED = '.gpu_fabric_commands/ib_fabric/'


def playbook(name, *args, env=None):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0', **(env or {}))
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', name),
           '-e', 'gpu_fabric_fabric_counter_interval=0.2'] + list(args)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)


def fabric_findings(report):
    return sorted((f['code'], f['severity'], f['host'], f['subject'], f['explained_by'] is None) for f in report['findings']
                  if f['code'] == 'IB_SUBNET_ERRORS' or f['code'].startswith('FABRIC_'))


def members(snapshot):
    with tarfile.open(snapshot) as tar:
        return dict((m.name, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers())


def capture_and_offline(tmp_path, inventory):
    dest = str(tmp_path)
    snapshots, offline_out = os.path.join(dest, 'snapshots'), os.path.join(dest, 'offline')
    node_tmp = os.path.join(dest, 'node-tmp')
    os.makedirs(node_tmp)
    # Check mode reads no fabric and writes nothing, on the nodes or the controller.
    checked = playbook('capture.yml', '--check', '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + snapshots,
                       env={'TMPDIR': node_tmp})
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    assert not os.path.exists(snapshots) and os.listdir(node_tmp) == []
    captured = playbook('capture.yml', '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + snapshots,
                        env={'TMPDIR': node_tmp})
    assert captured.returncode == 0, captured.stdout[-3000:] + captured.stderr[-3000:]
    # The temporary tarball and the directory of the fabric tools' outputs are gone from the nodes.
    assert os.listdir(node_tmp) == []
    # Nothing else in the snapshot folder: the outputs are inside the reading node's tarball.
    assert sorted(os.listdir(snapshots)) == ['capture.json', 'gpu-01.tar.gz', 'gpu-02.tar.gz']
    # Offline: nothing of the cluster is left, the simulated fabric included.
    shutil.rmtree(os.path.join(dest, 'pod'))
    offline = playbook('offline.yml', '-e', 'gpu_fabric_snapshots=' + snapshots, '-e', 'gpu_fabric_output_dir=' + offline_out)
    with open(os.path.join(offline_out, 'report.json')) as handle:
        return snapshots, offline, json.load(handle)


def test_offline_judges_the_saved_fabric_as_the_live_run(tmp_path):
    pod = tmp_path / 'pod'
    pod.mkdir()
    fabric.build(str(pod), faults=('subnet_port_errors',), python=sys.executable, nodes=2)
    inventory, live_out = str(pod / 'inventory.yml'), str(tmp_path / 'live')
    live = playbook('validate_fabric.yml', '-i', inventory, '-e', 'gpu_fabric_output_dir=' + live_out)
    with open(os.path.join(live_out, 'report.json')) as handle:
        live_report = json.load(handle)
    assert ('IB_SUBNET_ERRORS', 'error') in [f[:2] for f in fabric_findings(live_report)], live.stdout[-3000:]

    snapshots, offline, report = capture_and_offline(tmp_path, inventory)
    # The outputs ib_fabric_facts saved, in the snapshot of the node that read the fabric only.
    first, second = members(os.path.join(snapshots, 'gpu-01.tar.gz')), members(os.path.join(snapshots, 'gpu-02.tar.gz'))
    saved = sorted(name[len(SAVED):] for name in first if name.startswith(SAVED))
    assert saved == sorted(['iblinkinfo.txt', 'ibnetdiscover.txt', 'sminfo.txt', 'saquery_smir.txt', 'perfquery.1.txt',
                            'perfquery.2.txt', 'ibqueryerrors.1.txt', 'ibqueryerrors.2.txt', 'uptime.txt', 'read_at.txt'])
    assert b'SymbolErrorCounter' in first[SAVED + 'ibqueryerrors.2.txt']
    assert not [name for name in second if name.startswith(SAVED.rstrip('/'))]

    # The same fabric findings as the live run, the switch port's IB_SUBNET_ERRORS among them.
    assert fabric_findings(report) == fabric_findings(live_report), offline.stdout[-3000:]
    assert report['fabric']['discovered_by'] == live_report['fabric']['discovered_by'] == 'gpu-01'
    assert report['fabric']['spines'] == live_report['fabric']['spines'] and len(report['fabric']['leaves']) == 4
    assert offline.returncode == live.returncode == 2, offline.stdout[-3000:]   # the exit policy: root-cause errors


def test_a_capture_without_the_tools_says_the_fabric_was_not_read(tmp_path):
    pod = tmp_path / 'pod'
    pod.mkdir()
    fabric.build(str(pod), python=sys.executable, nodes=2)
    inventory = str(pod / 'inventory.yml')
    with open(inventory) as handle:
        hosts = yaml.safe_load(handle)
    # The node that reads the fabric finds no infiniband-diags on its PATH.
    host = hosts['all']['children']['gpu_nodes']['hosts']['gpu-01']
    host['gpu_fabric_environment']['PATH'] = '/usr/bin:/bin'
    with open(inventory, 'w') as handle:
        yaml.safe_dump(hosts, handle)

    snapshots, offline, report = capture_and_offline(tmp_path, inventory)
    text = members(os.path.join(snapshots, 'gpu-01.tar.gz'))[SAVED + 'not_read.txt'].decode()
    assert text.startswith('no_tools\ninfiniband-diags is not installed'), text
    missing = [f for f in report['findings'] if f['code'] == 'FABRIC_TOOLS_MISSING']
    assert [f['host'] for f in missing] == ['gpu-01'], report['findings']
    assert 'not read when the outputs were saved: infiniband-diags is not installed' in missing[0]['cause']
    assert report['fabric'].get('status') != 'ok' and report['hosts']['gpu-01']['status'] != 'ok'
