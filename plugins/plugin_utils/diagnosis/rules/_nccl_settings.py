# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NCCL's settings: every setting that reached a node's run, compared with its peers'.

What a run used is what its own log says (NCCL's ENV lines, 'NCCL_MAX_NCHANNELS set by environment
to 1.', module_utils/_nccl.py gpu_evidence: every rank's lines merged); NCCL prints a setting from a
configuration file the same way (tests/fixtures/real/h200x2/state/README.md), so where the project
did not pass it, the node's files (nccl_facts, module_utils/_nccl_conf.py) say which one holds it.

Measured on 2 x H200 (all_reduce_perf, NCCL 2.28.9, Avg bus bandwidth; tests/fixtures/real/h200x2/state/):
healthy 79.36 GB/s; NCCL_MAX_NCHANNELS=1 8.21; NCCL_PROTO=LL 43.55; a NCCL_CONF_FILE with
NCCL_MAX_NCHANNELS=2 and NCCL_ALGO=Ring 15.53; ~/.nccl.conf with NCCL_PROTO=Simple and NCCL_NTHREADS=64
39.18; /etc/nccl.conf with NCCL_BUFFSIZE=262144 66.12; NCCL_BUFFSIZE=65536 in the environment 34.33.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _profile
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._collective import run_host

DOCS = 'https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html'
# The tuning variables: what each does and what NCCL's documentation (DOCS; its source is
# docs/userguide/source/env.rst of github.com/NVIDIA/nccl) says of setting it. Every one of them but
# NCCL_CROSS_NIC is in its "Debugging" section: "should be used with caution ... fine to use for
# experiments, or to debug a problem, but should generally not be set for production code".
# ``discouraged``: the variable's own entry advises against setting it (a warning even where every node
# sets it alike). NCCL_P2P_DISABLE, NCCL_SHM_DISABLE (and NCCL_P2P_LEVEL LOC) are COLLECTIVE_GPUS_NOT_P2P's
# (rules/_collective.py): named there, not here again.
DEBUGGING = 'NCCL\'s documentation lists it under "Debugging": not to be set in production'
TUNING: Dict[str, Tuple[str, str, bool]] = {
    'NCCL_MAX_NCHANNELS': ('limits the channels (one CUDA block each) NCCL uses: fewer channels, less bandwidth',
                           DEBUGGING + '; deprecated since 2.17 for NCCL_MAX_CTAS', False),
    'NCCL_MIN_NCHANNELS': ('the fewest channels NCCL uses (more CUDA blocks)', DEBUGGING + '; deprecated since 2.17 for NCCL_MIN_CTAS',
                           False),
    'NCCL_MAX_CTAS': ('limits the CUDA blocks (channels) NCCL uses', DEBUGGING, False),
    'NCCL_MIN_CTAS': ('the fewest CUDA blocks (channels) NCCL uses', DEBUGGING, False),
    'NCCL_PROTO': ('the protocols NCCL may use (LL, LL128, Simple): a subset costs bandwidth at the sizes the others serve',
                   '"Users are discouraged from setting this variable, with the exception of disabling a specific protocol '
                   'in case a bug in NCCL is suspected"', True),
    'NCCL_ALGO': ('the algorithms NCCL may use (Ring, Tree, NVLS, CollNet, PAT)', DEBUGGING, False),
    'NCCL_BUFFSIZE': ('the buffer between each pair of GPUs (default 4 MiB): smaller buffers, more steps per message',
                      DEBUGGING + '; for memory constraints', False),
    'NCCL_NTHREADS': ('CUDA threads per block (default 512 on recent GPUs; 64, 128, 256 or 512)', DEBUGGING, False),
    'NCCL_P2P_LEVEL': ('the farthest distance between two GPUs at which NCCL uses P2P', DEBUGGING, False),
    'NCCL_P2P_NET_CHUNKSIZE': ('the chunk size of P2P operations over the network', DEBUGGING, False),
    'NCCL_NET_GDR_LEVEL': ('the farthest distance between a NIC and a GPU at which NCCL uses GPUDirect RDMA', DEBUGGING, False),
    'NCCL_NET_GDR_READ': ('whether NCCL sends from GPU memory with GPUDirect RDMA', DEBUGGING, False),
    'NCCL_CROSS_NIC': ('whether a ring or tree may use different NICs on different nodes', 'a system configuration variable', False),
    'NCCL_IB_QPS_PER_CONNECTION': ('IB queue pairs per connection (routing entropy on multi-level fabrics)', DEBUGGING, False),
    'NCCL_IB_SPLIT_DATA_ON_QPS': ('how a message is spread over several queue pairs', DEBUGGING, False),
    'NCCL_NCHANNELS_PER_NET_PEER': ('channels per network peer of point-to-point operations', 'not in the current documentation',
                                    False),
    'NCCL_NVLS_ENABLE': ('whether NCCL uses NVLink SHARP (NVLS)', DEBUGGING, False),
    'NCCL_LL_THRESHOLD': ('the size up to which NCCL uses the LL protocol', DEBUGGING, False),
    'NCCL_TREE_THRESHOLD': ('the size up to which NCCL uses the tree algorithm', DEBUGGING, False),
    'NCCL_SINGLE_RING_THRESHOLD': ('the size up to which NCCL uses one ring', DEBUGGING, False),
    'NCCL_LAUNCH_MODE': ('how NCCL launches its CUDA kernels', DEBUGGING, False),
    'NCCL_CTA_POLICY': ('how many CUDA blocks NCCL gives a collective', 'a system configuration variable', False),
}
UNKNOWN_SOURCE = 'a configuration file or the environment of the launcher'
# What is told of each node's files at validate time (nccl_facts 'source').
_FILE_NAMES = {'etc': '/etc/nccl.conf', 'home': '~/.nccl.conf', 'NCCL_CONF_FILE': '$NCCL_CONF_FILE'}


def _mapping(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def run_settings(entry: Dict[str, Any], facts: Optional[Dict[str, Any]]) -> Tuple[Dict[str, Dict[str, str]], str]:
    """({NAME: {'value', 'source'}} that reached a node's run, and what they were read from).

    The run's own ENV lines where it printed them (the ground truth: NCCL prints only what it read);
    else what the project passed and the node's files (nccl_facts), NCCL's precedence applied."""
    passed = dict((str(k), str(v)) for k, v in _mapping(entry.get('env')).items())
    seen = dict((str(k), str(v)) for k, v in _mapping(_mapping(entry.get('transport')).get('env')).items())
    known = _mapping(_mapping(facts).get('settings'))
    logged = bool(seen) or 'ENV' in passed.get('NCCL_DEBUG_SUBSYS', '').split(',')
    found: Dict[str, Dict[str, str]] = {}
    if logged:
        for name, value in seen.items():
            found[name] = {'value': value, 'source': _source(name, value, passed, known)}
        return found, 'its run\'s log (NCCL\'s ENV lines)'
    for name, value in passed.items():
        if name.startswith('NCCL_'):
            found[name] = {'value': value, 'source': 'the environment (fabric_collective_env)'}
    for name, item in known.items():
        if name not in found and isinstance(item, dict):
            found[name] = {'value': str(item.get('value')), 'source': _named(str(item.get('source')))}
    return found, 'the environment given and the node\'s configuration files (its run printed no ENV lines)'


def _named(source: str) -> str:
    return 'the environment of the launcher' if source == 'environment' else source


def _source(name: str, value: str, passed: Dict[str, str], known: Dict[str, Any]) -> str:
    """Where a setting NCCL saw came from: the environment the project passed, else the node's file that
    holds that value, else UNKNOWN_SOURCE."""
    if passed.get(name, '').strip() == value.strip() and name in passed:
        return 'the environment (fabric_collective_env)'
    item = _mapping(known.get(name))
    if item and str(item.get('value', '')).strip() == value.strip():
        return _named(str(item.get('source')))
    return UNKNOWN_SOURCE


def _reference(values: List[Optional[str]], unset_wins: bool = True) -> Tuple[bool, Optional[str]]:
    """(decided, the value most peers have): unset (None) wins a tie it is part of (``unset_wins``); other ties decide nothing."""
    counts = Counter(values).most_common()
    if not counts:
        return False, None
    top = [value for value, count in counts if count == counts[0][1]]
    if len(top) == 1:
        return True, top[0]
    return (True, None) if unset_wins and None in top else (False, None)


def _slow_hosts(findings: List[Finding]) -> Dict[str, List[str]]:
    slow: Dict[str, List[str]] = {}
    for item in findings:
        if item['code'] in (F.COLLECTIVE_NODE_SLOW, F.COLLECTIVE_BUSBW_LOW) and item.get('host'):
            slow.setdefault(item['host'], []).append(item['code'])
    return slow


def _p2p_named(findings: List[Finding]) -> Dict[str, List[str]]:
    named: Dict[str, List[str]] = {}
    for item in findings:
        if item['code'] == F.COLLECTIVE_GPUS_NOT_P2P and item.get('host'):
            named.setdefault(item['host'], []).extend(_mapping(_mapping(item.get('evidence')).get('variables')))
    return named


def _describe(name: str, item: Dict[str, Any], against: str = 'its peers') -> str:
    effect, advice, _discouraged = TUNING[name]
    if not item.get('differs'):
        peers = '%s: the same' % against if item.get('peers') == item['value'] else '%s differ among themselves' % against
    else:
        peers = '%s: %s' % (against, 'not set' if item.get('peers') is None else item['peers'])
    return '%s=%s from %s (%s): %s; %s' % (name, item['value'], item['source'], peers, effect, advice)


def _compare(settings: Dict[str, Dict[str, str]], peers: List[Dict[str, Dict[str, str]]], skip: List[str],
             unset_wins: bool = True) -> Dict[str, Dict[str, Any]]:
    """{NAME: {value, peers, differs, source, effect, docs}} of the tuning variables a node's run differs in from
    its peers' (the value most of them had), and the discouraged ones it sets."""
    variables: Dict[str, Dict[str, Any]] = {}
    for name in sorted(set(settings) | set(n for s in peers for n in s)):
        if name not in TUNING or name in skip:
            continue
        mine = settings.get(name)
        decided, reference = _reference([_mapping(s.get(name)).get('value') for s in peers], unset_wins) if peers else (True, None)
        value = mine['value'] if mine else None
        differs = bool(decided and peers and value != reference)
        if differs or (mine and TUNING[name][2]):
            variables[name] = {'value': value, 'peers': reference, 'differs': differs,
                               'source': mine['source'] if mine else 'not set here', 'effect': TUNING[name][0], 'docs': TUNING[name][1]}
    return variables


def _tuning(host: str, entry: Dict[str, Any], named: Dict[str, Dict[str, Any]], basis: str, symptoms: List[str],  # pylint: disable=too-many-arguments
            fleet: bool = False, baseline: Optional[Dict[str, Any]] = None) -> Finding:
    """COLLECTIVE_NCCL_TUNING of one node: an error where its run was slow (``symptoms``), else a warning;
    ``fleet``: the slow run was the one over every node; ``baseline``: its own run in the baseline report
    stood for its peers (a lone node)."""
    against = 'its baseline run' if baseline is not None else 'its peers'
    sources = sorted(set(v['source'] for v in named.values() if v['value'] is not None)) or ['the node\'s settings']
    text = '; '.join(_describe(n, v, against) if v['value'] is not None else
                     '%s is not set here, %s set %s: %s' % (n, against, v['peers'], TUNING[n][0]) for n, v in sorted(named.items()))
    if fleet:
        cause = ('the run over every node was slow (busbw %s GB/s) and NCCL on %s used settings most other nodes\' did not '
                 '(read from %s): %s (%s)' % (entry.get('busbw_gbs'), host, basis, text, DOCS))
    elif symptoms and baseline is not None:
        cause = ('the run over the GPUs of %s (busbw %s GB/s, %s GB/s in its own run of the baseline report) used NCCL '
                 'settings that run did not (read from %s): %s (%s)'
                 % (host, entry.get('busbw_gbs'), baseline.get('busbw_gbs'), basis, text, DOCS))
    elif symptoms:
        cause = ('the run over the GPUs of %s (busbw %s GB/s, its peers\' median %s GB/s) used NCCL settings its peers\' '
                 'did not (read from %s): %s (%s)' % (host, entry.get('busbw_gbs'), entry.get('peer_median_gbs'), basis, text, DOCS))
    else:
        cause = 'NCCL used on %s, read from %s: %s (%s)' % (host, basis, text, DOCS)
    return finding(F.COLLECTIVE_NCCL_TUNING, host, 'nccl settings',
                   {'variables': named, 'read_from': basis, 'busbw_gbs': entry.get('busbw_gbs'),
                    'peer_median_gbs': entry.get('peer_median_gbs'), 'symptoms': symptoms,
                    'baseline_gbs': baseline.get('busbw_gbs') if baseline is not None else None},
                   cause, severity='error' if symptoms else 'warning', variables=', '.join(sorted(named)),
                   sources=' and '.join(sources), at=[('gpus', host)])


def _baseline_peer(baseline: Optional[Dict[str, Any]], host: str) -> Optional[Dict[str, Any]]:
    """A lone node's own healthy run in the baseline report (gpu_fabric_baseline; _profile.baseline_run), or None."""
    return _profile.baseline_run(baseline, host)[0] if isinstance(baseline, dict) else None


def tuning_findings(local: Optional[Dict[str, Any]], nodes: Dict[str, Any], findings: List[Finding],
                    baseline: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """COLLECTIVE_NCCL_TUNING per node of the per-node runs (launcher local); a node without peers that ran
    is compared with its own run in the baseline report, where one is given and healthy."""
    hosts = _mapping(_mapping(local).get('hosts'))
    ran = dict((host, run_settings(_mapping(entry), _mapping(nodes.get(host)).get('nccl'))) for host, entry in hosts.items()
               if _mapping(entry).get('status') == 'ok')
    slow = _slow_hosts(findings)
    p2p = _p2p_named(findings)
    found = []
    for host in sorted(ran):
        settings, basis = ran[host]
        peers = [ran[other][0] for other in ran if other != host]
        before = _baseline_peer(baseline, host) if not peers else None
        if before is not None:
            peers = [run_settings(before, None)[0]]
        variables = _compare(settings, peers, p2p.get(host, []))
        # A discouraged variable only where the node sets it itself; any difference only on a slow node.
        named = dict((n, v) for n, v in variables.items()
                     if (host in slow and v['differs']) or (TUNING[n][2] and v['value'] is not None))
        if named:
            found.append(_tuning(host, _mapping(hosts[host]), named, basis, slow.get(host, []), baseline=before))
    return found


def fleet_tuning(run: Optional[Dict[str, Any]], nodes: Dict[str, Any], findings: List[Finding]) -> List[Finding]:
    """COLLECTIVE_NCCL_TUNING on each node of a slow run over several nodes that set tuning variables most of the
    others did not (NCCL's ENV lines of each host, module_utils/_nccl.py env_by_host). Only a setting a node's own
    lines show counts: a line missing is no proof that the node did not set it."""
    run = _mapping(run)
    slow = [f for f in findings if f['code'] == F.COLLECTIVE_BUSBW_LOW and not f.get('host')]
    by_host = _mapping(_mapping(run.get('transport')).get('env_by_host'))
    if not slow or len(by_host) < 3:   # of two nodes, neither is the odd one
        return []
    hosts = dict((name, run_host(name, nodes)) for name in by_host)
    p2p = _p2p_named(findings)
    found = []
    for name in sorted(by_host):
        host = hosts[name]
        if host is None:
            continue
        known = _mapping(_mapping(nodes.get(host)).get('nccl')).get('settings')
        passed = dict((str(k), str(v)) for k, v in _mapping(run.get('env')).items())
        mine = dict((n, {'value': str(v), 'source': _source(n, str(v), passed, _mapping(known))}) for n, v in _mapping(by_host[name]).items())
        peers = [dict((n, {'value': str(v)}) for n, v in _mapping(by_host[other]).items()) for other in by_host if other != name]
        # A tie decides nothing here: a peer without the line may have printed it in a process of another node.
        named = dict((n, v) for n, v in _compare(mine, peers, p2p.get(host, []), False).items() if v['differs'] and v['value'] is not None)
        if named:
            found.append(_tuning(host, {'busbw_gbs': _mapping(run.get('verdict')).get('busbw_gbs')}, named,
                                 'its ENV lines in the run over every node', [F.COLLECTIVE_BUSBW_LOW], fleet=True))
    return found


@rule(produces=(F.COLLECTIVE_NCCL_TUNING,), reads=(F.COLLECTIVE_NODE_SLOW, F.COLLECTIVE_BUSBW_LOW, F.COLLECTIVE_GPUS_NOT_P2P),
      parts=('collective', 'nodes', 'baseline'))
def nccl_tuning(fleet: Fleet, findings: List[Finding]) -> List[Finding]:
    local = (fleet.collective or {}).get('nodes')
    found = tuning_findings(local, fleet.nodes, findings, fleet.baseline) if local else []
    named = set(f['host'] for f in found)
    return found + [f for f in fleet_tuning((fleet.collective or {}).get('fleet'), fleet.nodes, findings) if f['host'] not in named]


def _shown(value: Any) -> str:
    return 'not set' if value is None else str(value)


def conf_differs(nodes: Dict[str, Any]) -> List[Finding]:
    """NCCL_CONF_DIFFERS on each node whose configuration file of a kind sets other variables than most nodes'."""
    facts = dict((host, _mapping(_mapping(node).get('nccl'))) for host, node in nodes.items() if _mapping(_mapping(node).get('nccl')))
    if len(facts) < 2:
        return []
    by_kind: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for host, item in facts.items():
        for entry in item.get('files') or []:
            if isinstance(entry, dict) and entry.get('state') in ('read', 'absent'):
                by_kind.setdefault(str(entry.get('source')), {})[host] = entry
    found = []
    for host in sorted(facts):
        differing: Dict[str, Dict[str, Any]] = {}
        for kind, files in sorted(by_kind.items()):
            mine = files.get(host)
            if mine is None:
                continue
            every = list(files.values())
            for name in sorted(set(n for f in every for n in _mapping(f.get('settings')))):
                # Most nodes' value, this node's own among them: of two nodes that differ, the one without the setting is not named.
                decided, reference = _reference([_mapping(f.get('settings')).get(name) for f in every]) if len(every) > 1 else (False, None)
                value = _mapping(mine.get('settings')).get(name)
                if decided and value != reference:
                    differing.setdefault(str(mine.get('path')), {})[name] = {'value': value, 'peers': reference, 'file': kind}
        for path, variables in sorted(differing.items()):
            text = ', '.join('%s=%s (most nodes: %s)' % (n, _shown(v['value']), _shown(v['peers'])) for n, v in sorted(variables.items()))
            kind = next(iter(variables.values()))['file']
            found.append(finding(F.NCCL_CONF_DIFFERS, host, path, {'path': path, 'variables': variables},
                                 '%s (%s) on %s differs from the other nodes\': %s; a job there gets it without saying so'
                                 % (path, _FILE_NAMES.get(kind, kind), host, text),
                                 file=path, variables=', '.join(sorted(variables)), at=[('node', host)]))
    return found


@rule(produces=(F.NCCL_CONF_DIFFERS,), parts=('judged',))
def nccl_conf(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return conf_differs(fleet.judged)


def library_skew(nodes: Dict[str, Any], local: Optional[Dict[str, Any]]) -> List[Finding]:
    """COLLECTIVE_NCCL_VERSION_SKEW from the NCCL library nccl_facts found on each node, where no node's own
    run said which it loaded (rules/_collective.py version_skew judges those)."""
    if any(_mapping(_mapping(e).get('versions')).get('library_version') for e in _mapping(_mapping(local).get('hosts')).values()):
        return []
    installed = dict((host, _mapping(_mapping(_mapping(node).get('nccl')).get('library'))) for host, node in nodes.items())
    installed = dict((host, lib) for host, lib in installed.items() if lib.get('version'))
    counts = Counter(str(lib['version']) for lib in installed.values()).most_common()
    if len(counts) < 2:
        return []
    fleet = counts[0][0] if counts[0][1] > counts[1][1] else None
    seen = dict(sorted(counts))
    found = []
    for host in sorted(installed):
        version = str(installed[host]['version'])
        if version == fleet:
            continue
        where = '%s, read from %s' % (installed[host].get('path'), installed[host].get('how'))
        cause = ('its NCCL library is %s (%s), %d of %d nodes have %s' % (version, where, seen[fleet], len(installed), fleet) if fleet
                 else 'its NCCL library is %s (%s); the nodes have %s, none by most' % (
                     version, where, ', '.join('%s (%d)' % item for item in sorted(seen.items()))))
        found.append(finding(F.COLLECTIVE_NCCL_VERSION_SKEW, host, 'nccl',
                             {'installed': version, 'library': installed[host], 'fleet': fleet, 'seen': seen}, cause, at=[('node', host)]))
    return found


@rule(produces=(F.COLLECTIVE_NCCL_VERSION_SKEW,), parts=('judged', 'collective'))
def nccl_library_versions(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return library_skew(fleet.judged, (fleet.collective or {}).get('nodes'))
