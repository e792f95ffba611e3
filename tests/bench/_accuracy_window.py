# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Accuracy of the window rules on the simulator's faults under load (tests/sim/faults.py WINDOW_FAULTS).

Each fault on one HCA of 'node' beside two healthy peers of its profile: every node rendered (tests/sim/render.py),
the pairwise mesh run step by step as perftest_run's sequence runs it (each ordered pair of nodes, each memory kind:
one step, every rail at once), each test moving the counters of its two ends as tests/sim/tools_window.py moves them
for the stand-in perftest (after_test), the windows read with the node-side reader (module_utils/_window.py
read_window; the pause counters through the ethtool stand-in's output and module_utils/_ethtool.py) before and after
each step, the records made by plugin_utils/bench/_bench.py sequence_records, judged by _bench.report() and diagnosed.

Right when the fault's code is a root finding on its HCA (``at`` holds ('hca', 'node', hca)); ``misattributed``: a
pair symptom explained by a root that is not the fault's own (or on another node); ``unexplained``: a pair symptom
through the fault left without a root; the healthy-congestion trap: no finding above info of the window codes, nor any
pair symptom (``false_positives``).

Usage: python -m tests.bench._accuracy_window   (JSON on stdout; tests/bench/diagnosis_accuracy.py runs it too)
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import sys
import tempfile

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ethtool, _window as node_window
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import error_counters, read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.sim import faults, render, tools_window
from tests.sim import node_facts as _node_facts

PROFILES = {'pcie_replays': 'nvidia_h100_8x_ndr', 'pcie_retraining': 'nvidia_h100_8x_ndr', 'pfc_pause_storm': 'amd_mi300x_roce',
            'cc_unhandled': 'amd_mi300x_roce', 'lossless_loss': 'amd_mi300x_roce', 'congestion_healthy': 'amd_mi300x_roce'}
# What each fault costs a test through its HCA (the share of the rate it reaches); cc_unhandled: only where the
# faulty HCA sends (the client of ib_write_bw), the congestion it does not answer slows it.
FACTOR = {'pcie_replays': 0.8, 'pcie_retraining': 0.75, 'pfc_pause_storm': 0.65, 'cc_unhandled': 0.7, 'lossless_loss': 0.7,
          'congestion_healthy': 0.96}
LINE_RATE = 0.97
TEST_S = 2.0
WINDOW_CODES = ('PCIE_ERRORS_UNDER_LOAD', 'PCIE_LINK_RETRAINING', 'ROCE_PFC_PAUSE_STORM', 'ROCE_CC_NOT_WORKING',
                'ROCE_LOSSLESS_LOSS', 'ROCE_CONGESTION', 'IB_ERRORS_UNDER_LOAD')
PEERS = ('peer1', 'peer2')


def _read(root, gpu_bdfs):
    """One counters read of a node as perftest_run's sequence makes it (the ethtool stand-in answered in-process)."""
    sysroot = SysRoot(root)
    devices = read_ib(sysroot)
    read = error_counters(devices)
    window = node_window.read_window(sysroot, devices, gpu_bdfs, None)
    window['unread'] = {}
    for device in devices:
        netdev = node_window._roce_netdev(device)  # pylint: disable=protected-access
        if netdev:
            code, out, _err = tools_window.ethtool(root, ['-S', netdev])
            if code == 0:
                window['pause'][device['name']] = _ethtool.pfc(_ethtool.parse_stats(out)['counters'])
    read['window'] = window
    return read


class Node(object):
    def __init__(self, directory, host, profile_name, fault=None):
        self.host = host
        self.root = '%s/%s' % (directory, host)
        profile = copy.deepcopy(render.load_profile(profile_name))
        self.target = faults.apply_window(profile, fault) if fault else None
        render.render(profile, self.root)
        self.plan = None
        self.steps = []
        self.before = None
        self.gpu_bdfs = []

    def spec(self, hca):
        return tools_window.spec_of(self.root, hca)


def _facts(nodes, profile_name):
    with tempfile.TemporaryDirectory(prefix='gf-acc-w-') as root:
        healthy = _node_facts.read(root, profile_name)
    return dict((host, copy.deepcopy(healthy)) for host in nodes)


def _step_tests(server, client, memory, plans):
    tests = []
    for rail in range(min(len(plans[server]['hcas']), len(plans[client]['hcas']))):
        test = {'server': server, 'client': client, 'rail': rail, 'memory': memory, 'round': 0,
                'server_hca': plans[server]['hcas'][rail], 'client_hca': plans[client]['hcas'][rail], 'pair_id': '%s-%s' % (server, client)}
        gpus = dict((h, plans[h]['gpu_by_hca'].get(test['%s_hca' % s])) for h, s in ((server, 'server'), (client, 'client')))
        if memory == 'gpu' and not all(gpus.values()):
            continue
        tests.append((test, gpus))
    return tests


def _run_step(nodes, server, client, memory, plans, fault, target):
    """One step of the mesh on both ends: the tests of every rail, the counters moved, the reads after."""
    tests = _step_tests(server, client, memory, plans)
    for host in (server, client):
        node = nodes[host]
        gpu_bdfs = sorted(set(g.get('bdf') for _t, gpus in tests for g in gpus.values() if g and g.get('bdf')))
        if node.before is None:
            node.before = _read(node.root, gpu_bdfs)
            node.gpu_bdfs = gpu_bdfs
    step_tests = dict((host, []) for host in (server, client))
    links = dict((host, {}) for host in (server, client))
    for test, gpus in tests:
        specs = dict((h, nodes[h].spec(test['%s_hca' % s])) for h, s in ((server, 'server'), (client, 'client')))
        for host, side, peer in ((server, 'server', client), (client, 'client', server)):
            hca = test['%s_hca' % side]
            tools_window.after_test(nodes[host].root, hca, specs[peer], side == 'client', TEST_S)
            info = (tools_window.load(nodes[host].root) or {})['hcas'][hca]
            links[host][info['bdf']] = [list(v) for v in (specs[host].get('retrain') or [[32.0, 16]])]
            entry = dict(test, side=side, peer=peer, status='ok', failure=None, tool_warnings=[], elapsed_s=TEST_S)
            if memory == 'gpu':
                entry['gpu'] = gpus[host]
            entry.update(_outcome(nodes, test, side, fault, target))
            step_tests[host].append(entry)
    for host in (server, client):
        node = nodes[host]
        after = _read(node.root, node.gpu_bdfs)
        # Each read a second later than the last (the window's seconds).
        for device in after['devices']:
            for port in device['ports']:
                port['counters_read_at'] = float(len(node.steps) + 1) * TEST_S
        if not node.steps:
            for device in node.before['devices']:
                for port in device['ports']:
                    port['counters_read_at'] = 0.0
        node.steps.append({'step': len(node.steps) + 1, 'tests': step_tests[host], 'counters': after, 'links': links[host],
                           'link_samples': 3})


def _outcome(nodes, test, side, fault, target):
    """The client's result: the rate of the slower end, less what the fault costs the test."""
    factor = 1.0
    for host, end in ((test['server'], 'server'), (test['client'], 'client')):
        if host == 'node' and test['%s_hca' % end] == target:
            if fault != 'cc_unhandled' or end == 'client':
                factor = min(factor, FACTOR[fault])
    rate = min(nodes[h].plan['rate_gbps'].get(test['%s_hca' % s]) or 0 for h, s in ((test['server'], 'server'), (test['client'], 'client')))
    if side != 'client':
        return {'summary': {}, 'results': []}
    return {'summary': {'bytes': 8388608, 'bw_avg_gbps': round(rate * LINE_RATE * factor, 2)}, 'results': []}


def case(fault, keep=None):
    """One fault on 'node' beside two healthy peers: (bench, findings, target HCA). ``keep`` (a dict) gets the
    nodes' 'records', 'plans' and 'facts' (the saved records' test judges them again)."""
    profile_name = PROFILES[fault]
    with tempfile.TemporaryDirectory(prefix='gf-acc-window-') as directory:
        nodes = {'node': Node(directory, 'node', profile_name, fault)}
        for peer in PEERS:
            nodes[peer] = Node(directory, peer, profile_name)
        facts = _facts(nodes, profile_name)
        for host, node in nodes.items():
            node.plan = _bench.node_plan(facts[host].get('ib'), facts[host].get('gdr'))
        plans = dict((host, node.plan) for host, node in nodes.items())
        target = nodes['node'].target['hca']
        for memory in ('host', 'gpu'):
            for server, client in itertools.permutations(sorted(nodes), 2):
                _run_step(nodes, server, client, memory, plans, fault, target)
        records = {}
        for host, node in nodes.items():
            result = {'steps': node.steps, 'counters_start': node.before}
            records[host] = _bench.sequence_records(host, [{'tests': t['tests']} for t in node.steps], result)
    bench = _bench.report(dict((host, {'records': records[host], 'plan': plans[host]}) for host in nodes), {})
    if keep is not None:
        keep.update(records=records, plans=plans, facts=facts)
    return bench, _diagnose.diagnose(facts, bench), target


def _touched(item, target):
    return ('hca', 'node', target) in [tuple(p) for p in item.get('path') or []]


def judge(fault, found, target):
    """The checks of one case."""
    code = faults.WINDOW_FAULTS[fault][2]
    by_id = dict((f['id'], f) for f in found)
    symptoms = [f for f in found if f['code'] in _diagnose.PAIR_SYMPTOMS and f['severity'] != 'info']
    result = {'fault': fault, 'target': target, 'symptoms': len(symptoms), 'misattributed': [], 'unexplained': [],
              'false_positives': []}
    if code is None:
        result['false_positives'] = sorted('%s@%s' % (f['code'], f['host']) for f in found if f['severity'] != 'info'
                                           and (f['code'] in WINDOW_CODES or f['code'] in _diagnose.PAIR_SYMPTOMS
                                                or f['code'] == 'BENCH_DEVICE_UNEXPLAINED'))
        result['right'] = not result['false_positives']
        return result
    roots = [f for f in found if f['code'] == code and f['explained_by'] is None and f['host'] == 'node'
             and ['hca', 'node', target] in (f.get('at') or [])]
    for item in symptoms:
        root = by_id.get(item['explained_by']) if item['explained_by'] else None
        if root is None:
            if _touched(item, target):
                result['unexplained'].append(item['id'])
        elif root['code'] != code or root['host'] != 'node' or not _touched(item, target):
            result['misattributed'].append('%s <- %s' % (item['id'], root['id']))
    result['false_positives'] = sorted('%s@%s' % (f['code'], f['host']) for f in found if f['severity'] != 'info'
                                       and f['code'] in WINDOW_CODES and f['host'] in PEERS)
    result['right'] = bool(roots) and not result['misattributed'] and not result['unexplained'] and not result['false_positives']
    result['roots'] = sorted(set(f['code'] for f in found if f['explained_by'] is None and f['severity'] != 'info'))
    return result


def run():
    """Every window fault and the healthy-congestion trap: {'right', 'total', 'false_positives', 'misattributed', 'cases'}."""
    cases = []
    for fault in sorted(faults.WINDOW_FAULTS):
        _bench_result, found, target = case(fault)
        cases.append(judge(fault, found, target))
        sys.stderr.write('window case %s: %s\n' % (fault, 'right' if cases[-1]['right'] else 'WRONG %s' % cases[-1]))
    return {'right': sum(c['right'] for c in cases), 'total': len(cases),
            'false_positives': sum(len(c['false_positives']) for c in cases),
            'misattributed': sum(len(c['misattributed']) for c in cases),
            'unexplained': sum(len(c['unexplained']) for c in cases), 'cases': cases}


def main(argv=None):
    argparse.ArgumentParser(prog='python -m tests.bench._accuracy_window', description=(
        "Accuracy of the window rules on the simulator's faults under load (tests/sim/faults.py WINDOW_FAULTS) and the "
        "healthy-congestion trap: one line per case on stderr, the JSON result on stdout.")).parse_args(argv)
    print(json.dumps(run(), indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
