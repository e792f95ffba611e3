# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Accuracy of the diagnosis on NCCL settings (COLLECTIVE_NCCL_TUNING, NCCL_CONF_DIFFERS): three simulated
2 x H200 nodes (profile h200x2_no_rdma), each running the collective over its own GPUs (launcher local)
through the nccl-tests stand-in (tests/sim/tools_nccl.py: it honours the settings from the environment and the
node's configuration files, slowed as the real runs were), one node with a planted setting. The facts are read
with the modules' readers (nccl_facts: module_utils/_nccl_conf.py) from the rendered roots; no ansible-playbook.

A case is right when COLLECTIVE_NCCL_TUNING is the root on the planted node, names the variable and its source
(the file, or the environment), and explains that node's slow symptoms; ``misattributed``: a slow symptom
explained by anything else, or the source named wrong; ``false_positives``: a finding above info on a
healthy node, or on any node of the traps (fleets that set documented tuning variables on every node alike).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective, _nccl, _nccl_conf
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.sim import node_facts as _node_facts
from tests.sim import render, tools_nccl

PROFILE = 'h200x2_no_rdma'
HOSTS = ('nodeA', 'nodeB', 'nodeC')
BASE_ENV = {'NCCL_NVLS_ENABLE': '0'}
FLEET_CONF = {'NCCL_IB_QPS_PER_CONNECTION': '4', 'NCCL_CROSS_NIC': '1', 'NCCL_BUFFSIZE': '8388608'}
# name: ({host: (env added, nccl_conf of the profile)}, expected {variable: source} on nodeB, or None: a trap).
CASES = {
    'etc_buffsize': ({'nodeB': ({}, {'/etc/nccl.conf': {'NCCL_BUFFSIZE': '65536'}})}, {'NCCL_BUFFSIZE': '/etc/nccl.conf'}),
    'home_proto_nthreads': ({'nodeB': ({}, {'~/.nccl.conf': {'NCCL_PROTO': 'Simple', 'NCCL_NTHREADS': '64'}})},
                            {'NCCL_NTHREADS': '~/.nccl.conf', 'NCCL_PROTO': '~/.nccl.conf'}),
    'conf_file_channels': ({'nodeB': ({'NCCL_CONF_FILE': '/tmp/my_nccl.conf'},
                                      {'/tmp/my_nccl.conf': {'NCCL_MAX_NCHANNELS': '2', 'NCCL_ALGO': 'Ring'}})},
                           {'NCCL_MAX_NCHANNELS': '/tmp/my_nccl.conf'}),
    'env_channels': ({'nodeB': ({'NCCL_MAX_NCHANNELS': '1'}, {})}, {'NCCL_MAX_NCHANNELS': 'environment'}),
    'env_proto_ll': ({'nodeB': ({'NCCL_PROTO': 'LL'}, {})}, {'NCCL_PROTO': 'environment'}),
    # The environment wins over the file (NCCL's precedence): the file's value is not what NCCL used.
    'env_over_etc': ({'nodeB': ({'NCCL_BUFFSIZE': '65536'}, {'/etc/nccl.conf': {'NCCL_BUFFSIZE': '262144'}})},
                     {'NCCL_BUFFSIZE': 'environment'}),
    # Traps: documented tuning variables set alike on every node.
    'trap_fleet_etc_conf': (dict((host, ({}, {'/etc/nccl.conf': FLEET_CONF})) for host in HOSTS), None),
    # A node that sets a variable of its own and is not slow: not named (only a slow node's difference is a root).
    'trap_one_node_differs_not_slow': ({'nodeC': ({'NCCL_BUFFSIZE': '8388608', 'NCCL_ALGO': 'Ring'}, {})}, None),
    'trap_fleet_env_buffsize': (dict((host, ({'NCCL_BUFFSIZE': '8388608', 'NCCL_MIN_NCHANNELS': '4'}, {})) for host in HOSTS), None),
}
SLOW_CODES = ('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_BUSBW_LOW')
# What a false positive is here: a finding of these codes (the NCCL settings' and the collective's symptoms) above
# info on a node without a planted setting; the profile's own findings (a VM without an RDMA NIC) are not counted.
COUNTED = ('COLLECTIVE_NCCL_TUNING', 'NCCL_CONF_DIFFERS', 'COLLECTIVE_NCCL_VERSION_SKEW', 'COLLECTIVE_GPUS_NOT_P2P') + SLOW_CODES
_FACTS = {}


def _run(root, host, env):
    """The stand-in's output of all_reduce_perf over the node's two GPUs, as collective_bench gets it."""
    saved = dict(os.environ)
    os.environ.update(dict(env, GF_SIM_ROOT=root, NCCL_DEBUG='INFO', NCCL_DEBUG_SUBSYS='INIT,NET,ENV,GRAPH'))
    os.environ.pop('GF_SIM_NCCL_NODES', None)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            tools_nccl.main(['all_reduce_perf', '-b', '1M', '-e', '1G', '-f', '4', '-g', '2'])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    parsed = _nccl.parse_text(out.getvalue().replace('node:1000', host + ':1000'))
    status, failure = _nccl.outcome(parsed, 0)
    result = dict((key, parsed[key]) for key in ('benchmark', 'ranks', 'hosts', 'versions', 'results', 'avg_busbw_gbs',
                                                 'max_busbw_gbs', 'wrong_total', 'out_of_bounds', 'transport'))
    result.update(status=status, failure=failure, verdict={'status': 'unknown', 'reasons': []},
                  env=dict(env, NCCL_DEBUG='INFO', NCCL_DEBUG_SUBSYS='INIT,NET,ENV,GRAPH'))
    return result


def _node(host, env, conf):
    """(facts with gpu_fabric_nccl, the collective's result) of one simulated node."""
    with tempfile.TemporaryDirectory(prefix='gf-acc-nccl-') as root:
        if PROFILE not in _FACTS:
            _FACTS[PROFILE] = _node_facts.read(root, PROFILE)
        else:
            render.render(render.load_profile(PROFILE), root)
        render.render_nccl_conf(root, {'nccl_conf': conf})
        facts = dict(_FACTS[PROFILE], nccl=_nccl_conf.read_nccl(SysRoot(root), env))
        return facts, _run(root, host, env)


def case(spec):
    planted, _expected = spec
    nodes, results = {}, {}
    for host in HOSTS:
        added, conf = planted.get(host, ({}, {}))
        env = dict(BASE_ENV, **added)
        nodes[host], results[host] = _node(host, env, conf)
    collective = {'nodes': _collective.judge_nodes(results)}
    return _diagnose.diagnose(nodes, None, collective), collective


def _source_right(named, want):
    source = str(named.get('source', ''))
    if want == 'environment':
        return source.startswith('the environment')
    if want.startswith('~/'):
        return source == render.sim_home() + want[1:]
    return source == want


def check(spec):
    found, collective = case(spec)
    expected = spec[1]
    above_info = [f for f in found if f['severity'] != 'info' and f['code'] in COUNTED]
    result = {'right': 0, 'total': 1, 'false_positives': 0, 'misattributed': 0}
    healthy = HOSTS if expected is None else [h for h in HOSTS if h != 'nodeB']
    result['false_positives'] = len([f for f in above_info if f['host'] in healthy])
    if expected is None:
        result['right'] = int(not result['false_positives'])
        return result, found, collective
    roots = [f for f in found if f['code'] == 'COLLECTIVE_NCCL_TUNING' and f['host'] == 'nodeB' and f['explained_by'] is None]
    symptoms = [f for f in found if f['code'] in SLOW_CODES and f['host'] == 'nodeB']
    root = roots[0] if roots else None
    variables = (root or {}).get('evidence', {}).get('variables', {}) if root else {}
    sources_right = all(_source_right(variables.get(n) or {}, want) for n, want in expected.items())
    explained = bool(symptoms) and all(f['explained_by'] == (root or {}).get('id') for f in symptoms)
    result['misattributed'] = len([f for f in symptoms if root is None or f['explained_by'] != root['id']]) + (
        0 if sources_right or root is None else 1)
    result['right'] = int(bool(root) and sources_right and explained)
    return result, found, collective


def run():
    """Every case: {'right', 'total', 'false_positives', 'misattributed', 'cases': {name: {...}}}."""
    total = {'right': 0, 'total': 0, 'false_positives': 0, 'misattributed': 0, 'cases': {}}
    for name, spec in sorted(CASES.items()):
        result, found, collective = check(spec)
        for key in ('right', 'total', 'false_positives', 'misattributed'):
            total[key] += result[key]
        busbw = dict((host, entry.get('busbw_gbs')) for host, entry in collective['nodes']['hosts'].items())
        total['cases'][name] = dict(result, busbw_gbs=busbw, roots=sorted(
            '%s@%s' % (f['code'], f['host']) for f in found if f['explained_by'] is None and f['severity'] != 'info'))
    return total


if __name__ == '__main__':
    import json
    print(json.dumps(run(), indent=1))
