# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""capture.yml then offline.yml through ansible-playbook on a simulated cluster.

Local-connection nodes (no root needed) and one dead node. The snapshots are taken, the
simulated roots are deleted, and offline.yml - given only the tarballs and some saved
benchmark outputs - must return the facts the live run read and the same root causes
(the seed-000 mm_kobj chain among them), name the dead node unreachable, and judge the
imported perftest pairs and the collective run.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'public')

SPEC = {'nodes': [
    {'name': 'n1', 'profile': 'nvidia_h100_8x_ndr'},
    {'name': 'n2', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['rate_degraded_1x', 'error_counters']},
    {'name': 'n3', 'profile': 'metax_c500_cx7', 'faults': ['mm_kobj_not_exported']},
]}
# Nothing listens on the discard port: the connection is refused at once, a dead node. And a
# node that answers but whose capture (and facts) fail: its root is not there.
DEAD = {'dead1': {'ansible_connection': 'ssh', 'ansible_host': '127.0.0.1', 'ansible_port': 9,
                  'ansible_ssh_common_args': '-o ConnectTimeout=3 -o StrictHostKeyChecking=no'},
        'n4': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
               'gpu_fabric_root': '/nonexistent/gpu_fabric/n4', 'gpu_fabric_become': False}}


def playbook(name, *args, env=None):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0', **(env or {}))
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, name)] + list(args)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)


def write_log(path, fixture, replace=()):
    """A fixture as a customer would send it: without our '## source' header lines."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.path.join(FIXTURES, fixture)) as handle:
        text = ''.join(line for line in handle if not line.startswith('## '))
    for old, new in replace:
        text = text.replace(old, new)
    with open(path, 'w') as handle:
        handle.write(text)


def facts_without_root(path):
    with open(path) as handle:
        facts = json.load(handle)
    for layer in ('ib', 'gdr', 'gpu'):
        if facts.get(layer):
            facts[layer].pop('root')
    return facts


def roots_of(report, layers=None):
    return set((f['code'], f['host']) for f in report['findings']
               if f['explained_by'] is None and (layers is None or f['layer'] in layers))


def test_capture_then_offline(tmp_path):
    dest = str(tmp_path)
    snapshots, live_out, offline_out = (os.path.join(dest, d) for d in ('snapshots', 'live', 'offline'))
    node_tmp = os.path.join(dest, 'node-tmp')
    os.makedirs(node_tmp)
    cluster.build(SPEC, dest, 'local', python=sys.executable, extra_hosts=DEAD)
    inventory = os.path.join(dest, 'inventory.yml')

    # Capture: the dead node costs only itself, and every temporary file on the nodes is gone.
    captured = playbook('playbooks/capture.yml', '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes',
                        '-e', 'gpu_fabric_output_dir=' + snapshots, env={'TMPDIR': node_tmp})
    assert captured.returncode == 4, captured.stdout[-3000:] + captured.stderr[-3000:]   # 4: a host was unreachable
    stats = recap(captured)
    assert stats['dead1']['unreachable'] == 1 and stats['n4']['failed'] == 1
    assert all(stats[n]['failed'] == 0 for n in ('n1', 'n2', 'n3'))
    assert sorted(os.listdir(snapshots)) == ['capture.json', 'n1.tar.gz', 'n2.tar.gz', 'n3.tar.gz']
    with open(os.path.join(snapshots, 'capture.json')) as handle:
        states = json.load(handle)['nodes']
    assert states.pop('n4').startswith('failed: root /nonexistent/gpu_fabric/n4 is not a directory')
    assert states == {'n1': 'ok', 'n2': 'ok', 'n3': 'ok', 'dead1': 'unreachable'}
    said = ' '.join(captured.stdout.split())   # the YAML callback folds long messages
    assert '3 of 5 node(s) captured' in said and 'no snapshot of: dead1 (unreachable), n4 (failed: root' in said
    # The temporary file is removed on every node that answered, the failed one included.
    assert os.listdir(node_tmp) == []

    # The live run, for comparison.
    live = playbook('validate_fabric.yml', '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + live_out)
    assert live.returncode == 4, live.stdout[-3000:]

    # Saved outputs a customer sends along: perftest pairs named <server>__<client>__<rail>__<memory>.txt
    # (seed 000's host and MACA sweeps at line rate; a 196 Gb/s HDR sweep on n2's 400 Gb/s rail 1),
    # an nccl-tests run over n1 and n3, and a file that is neither.
    logs = os.path.join(dest, 'logs')
    write_log(os.path.join(logs, 'n1__n3__0__host.txt'), 'perftest/seed000_metax_ib_write_bw_host_sweep.txt')
    write_log(os.path.join(logs, 'n1__n3__0__gpu.txt'), 'perftest/seed000_metax_ib_write_bw_maca0_sweep.txt')
    write_log(os.path.join(logs, 'pairs', 'n1__n2__1__host.txt'), 'perftest/aks_ib_write_bw_hdr_sweep_gbits.txt')
    write_log(os.path.join(logs, 'nccl', 'all_reduce.log'), 'nccl_tests/gcm_a100_allreduce_2node_16gpu.txt',
              replace=(('{host1}', 'n1'), ('{host2}', 'n3')))
    with open(os.path.join(logs, 'README.txt'), 'w') as handle:
        handle.write('logs from the cluster, as asked\n')

    # Offline: nothing but the tarballs (and the logs) is left.
    shutil.rmtree(os.path.join(dest, 'roots'))
    offline = playbook('playbooks/offline.yml', '-e', 'gpu_fabric_snapshots=' + snapshots,
                       '-e', 'gpu_fabric_output_dir=' + offline_out, '-e', 'gpu_fabric_import_logs=' + logs)
    assert offline.returncode == 4, offline.stdout[-4000:] + offline.stderr[-3000:]
    out = ' '.join(offline.stdout.split())   # the YAML callback folds long messages
    assert "no snapshot: unreachable when the snapshots were captured" in out
    assert 'n3: 3 RDMA device(s), 3/3 port(s) ACTIVE; 8 GPU(s) (metax); GPUDirect RDMA NOT ready' in out
    assert 'does not export mm_kobj' in out
    assert 'dead1: no facts (unreachable, or the facts tasks failed on it)' in out
    assert '3 perftest output(s)' in out and '1 of 2 other file(s) recognised as collective outputs' in out

    # The same facts as the live run read, node by node.
    for node in ('n1', 'n2', 'n3', 'dead1', 'n4'):
        assert facts_without_root(os.path.join(offline_out, 'facts', node + '.json')) == \
            facts_without_root(os.path.join(live_out, 'facts', node + '.json')), node

    with open(os.path.join(live_out, 'report.json')) as handle:
        live_report = json.load(handle)
    with open(os.path.join(offline_out, 'report.json')) as handle:
        report = json.load(handle)
    # The same root causes as the live run, the mm_kobj chain and the dead node among them; the
    # imported collective adds its own (no culprit search offline), the low pair is explained.
    assert ('GDR_MM_KOBJ_NOT_EXPORTED', 'n3') in roots_of(live_report)
    # Live, n4's facts task failed (its root does not exist) and was rescued: the failure is named.
    # Offline, n4 has no snapshot (capture failed there too): unreachable, as when it was captured.
    assert {('HOST_UNREACHABLE', 'dead1'), ('HOST_TASK_FAILED', 'n4')} <= roots_of(live_report)
    # The DCB settings (mlnx_qos/dcb talk to the live NIC) come from the outputs the capture saved
    # (roce_qos_facts from_log): each node's RoCE port is judged offline as it was live.
    unknown_qos = {('ROCE_QOS_UNKNOWN', n) for n in ('n1', 'n2', 'n3')}
    assert not unknown_qos & (roots_of(live_report) | roots_of(report))
    # The low imported pair ran on rail 1 (mlx5_1 at both ends); n2's degraded port is its rail 0 (mlx5_0): nothing
    # on the pair's path explains it, so it stays a root of its own, never pinned on n2's other rail.
    assert roots_of(report) == (roots_of(live_report) - {('HOST_TASK_FAILED', 'n4')}) | {
        ('HOST_UNREACHABLE', 'n4'), ('COLLECTIVE_BUSBW_LOW', None), ('BENCH_PAIR_LOW', None)}
    assert report['hosts']['dead1']['status'] == report['hosts']['n4']['status'] == 'unreachable'
    assert live_report['hosts']['n4']['status'] == 'error'
    # n1's own facts hold nothing wrong, offline as live (its RoCE port judged from the saved outputs);
    # the imported pairs and collective run that n1 is in are judged on their own below.
    assert live_report['hosts']['n1']['status'] == 'ok'
    assert [f['code'] for f in report['findings'] if f['host'] == 'n1'] == []
    assert report['fabric']['status'] == 'not_discovered'
    by_code = dict((f['code'], f) for f in report['findings'])
    assert by_code['BENCH_PAIR_LOW']['explained_by'] is None
    assert 'no finding on its path explains it' in by_code['BENCH_PAIR_LOW']['cause']
    assert ['hca', 'n2', 'mlx5_1'] in by_code['BENCH_PAIR_LOW']['path'] and ['hca', 'n2', 'mlx5_0'] not in by_code['BENCH_PAIR_LOW']['path']

    # The imported perftest pairs, judged against the snapshots' port rates.
    bench = report['bench']
    assert bench['verdicts'] == {'ok': 2, 'low': 1}
    pairs = dict(((p['server'], p['client'], p['rail'], p['memory']), p) for p in bench['pairs'])
    low = pairs[('n1', 'n2', 1, 'host')]
    assert (low['port_rate_gbps'], low['bw_avg_gbps'], low['verdict']) == (400.0, 196.55, 'low')
    assert pairs[('n1', 'n3', 0, 'gpu')]['gpu_vs_host'] > 0.9 and pairs[('n1', 'n3', 0, 'gpu')]['gpu_distance']
    assert bench['matrix']['host']['0']['n1']['n3'] == 392.25
    assert len(bench['imported_logs']) == 3

    # The collective run over n1 and n3, judged against their NICs (the role's expectation).
    collective = report['collective']
    assert collective['fleet']['hosts'] == ['n1', 'n3'] and collective['ranks_per_node'] == 8
    assert collective['fleet']['verdict']['status'] == 'low' and collective['expected']['gbs'] > 0
    assert [e['recognised'] for e in collective['imported_logs']] == [False, True]

    with open(os.path.join(offline_out, 'report.md')) as handle:
        assert '`GDR_MM_KOBJ_NOT_EXPORTED` on n3' in handle.read()


def test_offline_needs_snapshots(tmp_path):
    result = playbook('playbooks/offline.yml', '-e', 'gpu_fabric_output_dir=' + str(tmp_path))
    assert result.returncode == 2 and 'give -e gpu_fabric_snapshots=' in result.stdout
    result = playbook('playbooks/offline.yml', '-e', 'gpu_fabric_snapshots=' + str(tmp_path), '-e', 'gpu_fabric_output_dir=' + str(tmp_path))
    assert result.returncode == 2 and 'no <node>.tar.gz in' in result.stdout


def test_a_snapshot_packed_from_its_top_is_analysed(tmp_path):
    """`tar -C dir -czf node.tar.gz .` (members '.', './sys/...'): the node is analysed, not failed."""
    dest = str(tmp_path)
    cluster.build({'nodes': [{'name': 'n1', 'profile': 'nvidia_h100_8x_ndr'}]}, dest, 'local', python=sys.executable)
    snapshots, out = os.path.join(dest, 'snapshots'), os.path.join(dest, 'out')
    os.makedirs(snapshots)
    subprocess.run(['tar', '-C', os.path.join(dest, 'roots', 'n1'), '-czf', os.path.join(snapshots, 'n1.tar.gz'), '.'], check=True)
    shutil.rmtree(os.path.join(dest, 'roots'))
    result = playbook('playbooks/offline.yml', '-e', 'gpu_fabric_snapshots=' + snapshots, '-e', 'gpu_fabric_output_dir=' + out)
    assert 'analysed with members refused' not in ' '.join(result.stdout.split()), result.stdout[-3000:]
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    assert report['hosts']['n1']['status'] != 'error', report['hosts']['n1']
    assert not [f for f in report['findings'] if f['code'] == 'HOST_TASK_FAILED'], report['findings']
    assert 'n1: 9 RDMA device(s), 9/9 port(s) ACTIVE' in ' '.join(result.stdout.split()), result.stdout[-3000:]


def test_capture_refuses_a_destination_that_is_no_regular_file(tmp_path):
    """fetch hashes an existing dest (a FIFO blocks it forever) and writes through a symlink: a node
    whose <host>.tar.gz is a FIFO or a symlink (even to a regular file) fails alone, the rest are captured."""
    dest = str(tmp_path)
    snapshots = os.path.join(dest, 'snapshots')
    os.makedirs(snapshots)
    spec = {'nodes': [dict(SPEC['nodes'][0], name=name) for name in ('a', 'b', 'c')]}
    cluster.build(spec, dest, 'local', python=sys.executable)
    os.mkfifo(os.path.join(snapshots, 'a.tar.gz'))
    outside = os.path.join(dest, 'outside')
    with open(outside, 'w') as handle:
        handle.write('keep')
    os.symlink(outside, os.path.join(snapshots, 'b.tar.gz'))
    captured = playbook('playbooks/capture.yml', '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes',
                        '-e', 'gpu_fabric_output_dir=' + snapshots)
    assert captured.returncode == 2, captured.stdout[-3000:] + captured.stderr[-3000:]
    stats = recap(captured)
    assert stats['a']['failed'] == 1 and stats['b']['failed'] == 1 and stats['c']['failed'] == 0, captured.stdout[-4000:]
    said = ' '.join(captured.stdout.split())
    assert '/a.tar.gz exists on the controller and is a FIFO, not a regular file: the snapshot was not fetched over it' in said
    assert ('/b.tar.gz exists on the controller and is a symlink (refused even to a regular file: it may point out of the'
            ' output directory)') in said
    assert stat.S_ISFIFO(os.lstat(os.path.join(snapshots, 'a.tar.gz')).st_mode)
    assert os.readlink(os.path.join(snapshots, 'b.tar.gz')) == outside and open(outside).read() == 'keep'
    assert os.path.getsize(os.path.join(snapshots, 'c.tar.gz')) > 0
