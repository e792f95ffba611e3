# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""COLLECTIVE_NCCL_TUNING, NCCL_CONF_DIFFERS and the library's version skew, on the real runs of 2 x H200
with one NCCL setting each (tests/fixtures/real/h200x2/state/, its README says how they were run)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective, _nccl
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._nccl_conf import effective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules import _nccl_settings

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(HERE, '..', '..', '..', 'fixtures', 'real', 'h200x2', 'state')
BASE = {'NCCL_NVLS_ENABLE': '0'}
NO_FILES = (('/root/.nccl.conf', 'home', None), ('/etc/nccl.conf', 'etc', None))


def result(name, env):
    with open(os.path.join(STATE, name)) as handle:
        parsed = _nccl.parse_any(handle.read())
    status, failure = _nccl.outcome(parsed)
    out = dict((key, parsed[key]) for key in ('benchmark', 'ranks', 'hosts', 'versions', 'results', 'avg_busbw_gbs',
                                              'max_busbw_gbs', 'wrong_total', 'out_of_bounds', 'transport'))
    out.update(status=status, failure=failure, env=env, verdict={'status': 'unknown', 'reasons': []})
    return out


def facts(files=NO_FILES, version='2.28.9'):
    listed = [{'path': path, 'source': source, 'state': 'read' if settings else 'absent', 'settings': settings or {}}
              for path, source, settings in files]
    return {'files': listed, 'settings': effective({}, listed), 'library': {'version': version, 'path': '/usr/lib/libnccl.so.2'},
            'header': None, 'not_read': {}}


def diagnose(planted, env=None, files=NO_FILES, peers=('nodeA', 'nodeC')):
    results = dict((host, result('nccl_healthy.txt', BASE)) for host in peers)
    results['nodeB'] = result(planted, dict(BASE, **(env or {})))
    nodes = dict((host, {'ib': None, 'gdr': {'gpus': []}, 'nccl': facts()}) for host in peers)
    nodes['nodeB'] = {'ib': None, 'gdr': {'gpus': []}, 'nccl': facts(files)}
    found = _diagnose.diagnose(nodes, None, {'nodes': _collective.judge_nodes(results)})
    return dict(((f['code'], f['host']), f) for f in found)


@pytest.mark.parametrize('planted, env, files, variables, source', [
    ('nccl_maxnch1.txt', {'NCCL_MAX_NCHANNELS': '1'}, NO_FILES, ['NCCL_MAX_NCHANNELS'], 'the environment (fabric_collective_env)'),
    ('nccl_proto_ll.txt', {'NCCL_PROTO': 'LL'}, NO_FILES, ['NCCL_PROTO'], 'the environment (fabric_collective_env)'),
    ('nccl_etcconf.txt', None, [('/root/.nccl.conf', 'home', None), ('/etc/nccl.conf', 'etc', {'NCCL_BUFFSIZE': '262144'})],
     ['NCCL_BUFFSIZE'], '/etc/nccl.conf'),
    ('nccl_homeconf.txt', None, [('/root/.nccl.conf', 'home', {'NCCL_PROTO': 'Simple', 'NCCL_NTHREADS': '64'}),
                                 ('/etc/nccl.conf', 'etc', None)], ['NCCL_NTHREADS', 'NCCL_PROTO'], '/root/.nccl.conf'),
    ('nccl_conffile.txt', {'NCCL_CONF_FILE': '/tmp/my_nccl.conf'},
     [('/tmp/my_nccl.conf', 'NCCL_CONF_FILE', {'NCCL_MAX_NCHANNELS': '2', 'NCCL_ALGO': 'Ring'}), ('/etc/nccl.conf', 'etc', None)],
     ['NCCL_ALGO', 'NCCL_MAX_NCHANNELS'], '/tmp/my_nccl.conf'),
    # Not passed by the project and in no file the node's facts read: said so, never guessed.
    ('nccl_buffsize.txt', None, NO_FILES, ['NCCL_BUFFSIZE'], _nccl_settings.UNKNOWN_SOURCE),
])
def test_the_slow_node_gets_its_settings_as_the_root(planted, env, files, variables, source):
    found = diagnose(planted, env, files)
    root = found[('COLLECTIVE_NCCL_TUNING', 'nodeB')]
    assert root['severity'] == 'error' and root['explained_by'] is None and root['at'] == [['gpus', 'nodeB']]
    assert sorted(root['evidence']['variables']) == variables
    assert all(item['source'] == source and item['peers'] is None for item in root['evidence']['variables'].values())
    assert source in root['cause'] and 'env.html' in root['cause'] and source in root['remedy']
    for code in ('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_BUSBW_LOW'):
        if (code, 'nodeB') in found:
            assert found[(code, 'nodeB')]['explained_by'] == root['id']
    assert ('COLLECTIVE_NODE_SLOW', 'nodeB') in found
    # Nothing on the healthy peers: no root, no symptom, no difference of their files.
    assert not [key for key in found if key[1] in ('nodeA', 'nodeC') and key[0] != 'HOST_NOTHING_TO_CHECK']


def test_a_fleet_that_sets_a_documented_variable_alike_is_no_finding():
    # The /etc/nccl.conf run on every node: alike, the same speed, nothing to say.
    results = dict((host, result('nccl_etcconf.txt', BASE)) for host in ('nodeA', 'nodeB', 'nodeC'))
    nodes = dict((host, {'ib': None, 'gdr': {'gpus': []},
                         'nccl': facts([('/root/.nccl.conf', 'home', None), ('/etc/nccl.conf', 'etc', {'NCCL_BUFFSIZE': '262144'})])})
                 for host in results)
    found = _diagnose.diagnose(nodes, None, {'nodes': _collective.judge_nodes(results)})
    assert not [f for f in found if f['code'] in ('COLLECTIVE_NCCL_TUNING', 'NCCL_CONF_DIFFERS', 'COLLECTIVE_NODE_SLOW')]


def test_a_discouraged_variable_set_alike_is_a_warning_not_a_root_of_anything():
    results = dict((host, result('nccl_proto_ll.txt', dict(BASE, NCCL_PROTO='LL'))) for host in ('nodeA', 'nodeB'))
    local = _collective.judge_nodes(results)
    found = _nccl_settings.tuning_findings(local, {}, [])
    assert [(f['host'], f['severity']) for f in found] == [('nodeA', 'warning'), ('nodeB', 'warning')]
    assert '"Users are discouraged from setting this variable' in found[0]['cause']
    # The same run slow (its symptom handed to the rule): an error, the root of it.
    slow = _nccl_settings.tuning_findings(local, {}, [{'code': 'COLLECTIVE_BUSBW_LOW', 'host': 'nodeA'}])
    assert [(f['host'], f['severity']) for f in slow] == [('nodeA', 'error'), ('nodeB', 'warning')]


def test_p2p_variables_stay_collective_gpus_not_p2p():
    entry = {'status': 'ok', 'env': {'NCCL_P2P_LEVEL': 'LOC'}, 'transport': {'env': {'NCCL_P2P_LEVEL': 'LOC', 'NCCL_NVLS_ENABLE': '0'}}}
    local = {'hosts': {'a': entry, 'b': {'status': 'ok', 'env': {}, 'transport': {'env': {'NCCL_NVLS_ENABLE': '0'}}}}}
    named = [{'code': 'COLLECTIVE_GPUS_NOT_P2P', 'host': 'a', 'evidence': {'variables': {'NCCL_P2P_LEVEL': 'LOC'}}},
             {'code': 'COLLECTIVE_NODE_SLOW', 'host': 'a'}]
    assert _nccl_settings.tuning_findings(local, {}, named) == []
    assert [f['evidence']['variables'].keys() for f in _nccl_settings.tuning_findings(local, {}, named[1:])] == [{'NCCL_P2P_LEVEL': 0}.keys()]


def test_conf_differs_names_the_odd_node_and_its_file():
    odd = facts([('/home/u/.nccl.conf', 'home', None), ('/etc/nccl.conf', 'etc', {'NCCL_MAX_NCHANNELS': '1', 'NCCL_IB_HCA': 'mlx5_0'})])
    same = facts([('/home/u/.nccl.conf', 'home', None), ('/etc/nccl.conf', 'etc', {'NCCL_IB_HCA': 'mlx5_0'})])
    found = _nccl_settings.conf_differs({'a': {'nccl': same}, 'b': {'nccl': odd}, 'c': {'nccl': same}})
    assert [(f['host'], f['subject']) for f in found] == [('b', '/etc/nccl.conf')]
    assert found[0]['evidence']['variables'] == {'NCCL_MAX_NCHANNELS': {'value': '1', 'peers': None, 'file': 'etc'}}
    assert found[0]['severity'] == 'warning' and 'NCCL_MAX_NCHANNELS' in found[0]['remedy']
    # Two nodes, one file: the node without it is not the odd one.
    assert [f['host'] for f in _nccl_settings.conf_differs({'a': {'nccl': same}, 'b': {'nccl': odd}})] == ['b']
    assert _nccl_settings.conf_differs({'a': {'nccl': same}, 'b': {'nccl': same}}) == []


def test_the_library_version_skew_where_no_run_said_which_it_loaded():
    nodes = {'a': {'nccl': facts(version='2.28.9')}, 'b': {'nccl': facts(version='2.21.5')}, 'c': {'nccl': facts(version='2.28.9')}}
    found = _nccl_settings.library_skew(nodes, None)
    assert [(f['code'], f['host']) for f in found] == [('COLLECTIVE_NCCL_VERSION_SKEW', 'b')]
    assert '2.21.5' in found[0]['cause'] and '2 of 3 nodes have 2.28.9' in found[0]['cause']
    ran = {'hosts': {'a': {'versions': {'library_version': '2.28.9+cuda13.0'}}}}
    assert _nccl_settings.library_skew(nodes, ran) == []


def _fleet_log(settings_by_host):
    lines = ['# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809', '# Collective test starting: all_reduce_perf']
    for rank, (host, settings) in enumerate(sorted(settings_by_host.items())):
        lines.append('#  Rank %2d Group  0 Pid   1000 on %10s device  0 [0000:18:00] NVIDIA H200' % (rank, host))
        for name, value in sorted(settings.items()):
            lines.append('%s:1000:1010 [%d] NCCL INFO %s set by environment to %s.' % (host, rank, name, value))
    return '\n'.join(lines)


def test_a_slow_run_over_every_node_names_the_node_whose_own_lines_differ():
    transport = _nccl.parse_text(_fleet_log({'n1': {'NCCL_NVLS_ENABLE': '0'}, 'n2': {'NCCL_NVLS_ENABLE': '0', 'NCCL_MAX_NCHANNELS': '1'},
                                             'n3': {'NCCL_NVLS_ENABLE': '0'}}))['transport']
    assert transport['env_by_host'] == {'n1': {'NCCL_NVLS_ENABLE': '0'}, 'n2': {'NCCL_NVLS_ENABLE': '0', 'NCCL_MAX_NCHANNELS': '1'},
                                        'n3': {'NCCL_NVLS_ENABLE': '0'}}
    nodes = dict((host, {'nccl': facts([('/etc/nccl.conf', 'etc', {'NCCL_MAX_NCHANNELS': '1'} if host == 'n2' else None)])})
                 for host in ('n1', 'n2', 'n3'))
    run = {'transport': transport, 'env': {}, 'verdict': {'busbw_gbs': 10.0}}
    slow = [{'code': 'COLLECTIVE_BUSBW_LOW', 'host': None}]
    found = _nccl_settings.fleet_tuning(run, nodes, slow)
    assert [(f['host'], f['severity']) for f in found] == [('n2', 'error')]
    assert found[0]['evidence']['variables']['NCCL_MAX_NCHANNELS']['source'] == '/etc/nccl.conf'
    assert 'the run over every node was slow' in found[0]['cause']
    # Not slow, or a node whose line is missing (NCCL printed it elsewhere): nothing.
    assert _nccl_settings.fleet_tuning(run, nodes, []) == []
    both = {'NCCL_ALGO': 'Ring', 'NCCL_NVLS_ENABLE': '0'}
    missing = _nccl.parse_text(_fleet_log({'n1': both, 'n2': {'NCCL_NVLS_ENABLE': '0'}, 'n3': both}))['transport']
    assert _nccl_settings.fleet_tuning(dict(run, transport=missing), nodes, slow) == []
