# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The cause linker: what a rule alone could not know of a symptom's path (complete_paths),
which root on its path explains each symptom (link_causes), and pair symptoms that no root
explains, said once on the device their tests share (unexplained_findings)."""

from __future__ import annotations

from typing import AbstractSet, Any, Dict, List, Optional, Set, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import LAYERS, Finding, Place, finding
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import natural_key
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails  # what role each HCA plays
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._fabric import routes as fabric_routes  # fabric beyond the node
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules._bench import pair_path, pair_subject


# ---------------------------------------------------------------------------- roots and symptoms

# Which codes a root explains, and when: the registry's (plugin_utils/diagnosis/_findings.py); where: F.on_path.
EXPLAINS = F.EXPLAINS
# A pair's symptoms (bench_findings), judged again per device when no root on their path explains them.
PAIR_SYMPTOMS = F.codes_with('pair_symptom')
# Roots said only where nothing else explains a symptom (the differential diagnosis): never preferred to another.
FALLBACK = F.codes_with('fallback')


def _measured(root: Finding) -> float:
    """How bad the runs that named a culprit of the culprit search were: the lowest ratio (busbw over the
    expectation) of its own runs (evidence.run, _search_findings); other roots, and a culprit named from its
    facts (no run of its own), inf. Of several culprits on a fleet symptom's path, the one whose own runs
    account for the fleet's measured ratio - the lowest - explains it."""
    evidence = root.get('evidence')
    run = evidence.get('run') if isinstance(evidence, dict) else None
    ratio = run.get('ratio') if isinstance(run, dict) and root['code'] == F.COLLECTIVE_CULPRIT else None
    return float(ratio) if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) else float('inf')


def link_causes(findings: List[Finding]) -> List[Finding]:
    """Set explained_by on every symptom that a root on its path explains; roots keep None.

    A root explains a symptom when the registry says its code explains the symptom's
    (F.explains) and one of the places it sits on (``at``) is on the places the symptom's tests
    went through (``path``, F.on_path): a node-wide root of either end, the HCA of the test's
    rail at either end, the GPU<->NIC path of the GPU memory used, a link on its route. A root
    without places explains nothing and a symptom without a path is explained by nothing (fail
    closed): a symptom is never pinned on a device it did not touch. Where several roots are on
    the path, the one the symptom's own evidence names wins (F.named: GPUDirect RDMA not used ->
    the GDR chain, not a slow port), then a root whose own place is on the path before a node-wide
    one, then the lowest layer, then (culprits of the culprit search) the one whose own runs measured the lowest
    ratio, then the order given; a fallback root (the differential) only where no other one is. A failed pair is judged by the failure that
    made it fail (evidence.failed_side, _bench.failure_cause): GPU memory its end could not register
    is that end's peer-memory chain, never its peer's (F.explains with the root's host). A symptom
    explained by something that is itself explained points at that root.
    """
    order = dict((layer, index) for index, layer in enumerate(LAYERS))
    roots: Dict[str, List[Tuple[int, Finding]]] = {}
    for position, item in enumerate(findings):
        item['explained_by'] = None
        if item['code'] in EXPLAINS and item.get('at'):
            for code in EXPLAINS[item['code']]:
                roots.setdefault(code, []).append((position, item))
    for symptom in findings:
        if not symptom.get('path'):
            continue
        best = None
        for position, root in roots.get(symptom['code'], ()):
            if root is symptom or not F.explains(root['code'], symptom, root.get('host')) \
                    or not F.on_path(root['at'], symptom['path']):
                continue
            # A root whose own place is on the path before a node-wide one, whatever their layers (a port that
            # is down, or an HCA's PCIe link trained low, before the node's missing HCA, for a test through it).
            exact = any(place[0] != 'node' and list(place) in symptom['path'] for place in root['at'])
            rank = (root['code'] in FALLBACK, not F.named(root['code'], symptom), not exact, order.get(root['layer'], len(order)),
                    _measured(root), position)
            if best is None or rank < best[0]:
                best = (rank, root)
        if best:
            symptom['explained_by'] = best[1]['id']
    # Chains: a symptom explained by something that is itself explained points at the root.
    by_id = dict((f['id'], f) for f in findings)
    for item in findings:
        seen = set([item['id']])
        while item['explained_by'] and by_id.get(item['explained_by'], {}).get('explained_by') \
                and by_id[item['explained_by']]['explained_by'] not in seen:
            seen.add(item['explained_by'])
            item['explained_by'] = by_id[item['explained_by']]['explained_by']
    return findings


def collective_path(host: str, node: Any, hcas: Optional[List[str]] = None,
                    role_of: Optional[Dict[str, Any]] = None) -> List[Tuple[Any, ...]]:
    """The places a collective run went through on ``host``: the node, its GPUs' interconnect,
    each GPU and its PCIe path to its nearest NIC, and the HCAs (``hcas``: the names NCCL used,
    where the run says; else the node's compute rails, ``role_of``: module_utils/_rails.py roles()
    of the node, from the node when not given - a storage or management port carries no
    collective, so its fault explains none). For the culprit search's findings, and for the
    fleet run's symptoms (_diagnose.collective_findings)."""
    gdr, ib = (node or {}).get('gdr') or {}, (node or {}).get('ib') or {}
    names: List[Any] = [d.get('name') for d in ib.get('devices') or [] if isinstance(d, dict) and d.get('name')]
    role_of = role_of if role_of is not None else _rails.node_roles(node)
    used = [name for name in hcas or [] if name in names] or [name for name in names if _rails.is_compute(role_of, name)]
    path: List[Tuple[Any, ...]] = [('node', host), ('gpus', host)] + [('hca', host, name) for name in sorted(set(used), key=natural_key)]
    for gpu in gdr.get('gpus') or []:
        if isinstance(gpu, dict) and gpu.get('name'):
            path.append(('gpu', host, gpu['name']))
            if gpu.get('nearest_nic') in used:
                path.append(('gpu_nic', host, gpu['name'], gpu['nearest_nic']))
    return path


def _with_routes(path: Optional[List[Place]], routes: Dict[Any, Any]) -> List[Place]:
    """A pair's path with the fabric links it may cross (_fabric.routes): each end's cable, and the
    up-links of both leaves where the ends sit on different leaves."""
    path = path or []
    found = [routes.get((place[1], place[2])) for place in path if place[0] == 'hca' and len(place) == 3]
    ends: List[Dict[str, Any]] = [end for end in found if end]
    extra = [end['cable'] for end in ends]
    if len(set(end['leaf'] for end in ends)) > 1:
        extra += [link for end in ends for link in end['uplinks']]
    return [tuple(place) for place in path] + extra


def _split(item: Finding) -> bool:
    """A stage refused because the run holds part of the nodes (a job slice, a --limit): the run's own doing, on no
    node's path, so no node's fault explains it."""
    evidence = item.get('evidence')
    return isinstance(evidence, dict) and evidence.get('split') is True


def complete_paths(findings: List[Finding], nodes: Dict[str, Any], bench: Optional[Dict[str, Any]] = None,
                   collective: Optional[Dict[str, Any]] = None, roles: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """What a rule alone could not know of a symptom's path: the fabric links a pair crosses, the
    HCAs of a node left out of the mesh, the devices a culprit's collective ran through, every node
    of a run that did not run. ``roles``: {host: _rails.roles()} where the caller has them."""
    roles = roles or {}
    routes = fabric_routes(nodes)
    transport = (((collective or {}).get('fleet') or {}).get('transport')) or {}
    used = [str(name).split(':', 1)[0] for name in transport.get('hcas') or []]
    for item in findings:
        code, host = item['code'], item.get('host')
        if code in PAIR_SYMPTOMS + (F.FABRIC_SLOW_PAIR_PATH,) and item.get('path') and routes:
            item['path'] = F.places(_with_routes(item['path'], routes))
        elif code == F.BENCH_NODE_NOT_TESTED and host in nodes:
            item['path'] = F.places([tuple(p) for p in item.get('path') or []] + collective_path(host, nodes[host], role_of=roles.get(host))[2:])
        elif code in (F.COLLECTIVE_CULPRIT, F.COLLECTIVE_SUSPECT) and host:
            item['path'] = F.places(collective_path(host, nodes.get(host), used, roles.get(host)))
            if transport.get('gdr') is False and isinstance(item.get('evidence'), dict):
                # The run it was named in did not use GPUDirect RDMA (NCCL's INFO): a GDR root is preferred.
                item['evidence'] = dict(item['evidence'], gdr=False)
        elif code in (F.BENCH_NOT_RUN, F.COLLECTIVE_NOT_RUN) and not host and not _split(item):
            item['path'] = F.places([tuple(p) for p in item.get('path') or [('run',)]] + [('node', h) for h in sorted(nodes)])
    return findings


# A pair's test as the search for unexplained devices sees it: the pair, its symptom (None: it passed), its places.
Test = Tuple[Dict[str, Any], Any, Any]

# Which place a device finding names first when two cover the same tests: the most specific.
_SPECIFIC = ('hca', 'gpu_nic', 'gpu', 'node')


def _device_words(place: Tuple[str, ...], rails: List[str]) -> str:
    if place[0] == 'hca':
        return '%s of %s (rail %s)' % (place[2], place[1], ', '.join(str(r) for r in rails)) if rails else \
            '%s of %s' % (place[2], place[1])
    if place[0] == 'gpu_nic':
        return 'the PCIe path between %s and %s of %s' % (place[2], place[3], place[1])
    if place[0] == 'gpu':
        return '%s of %s' % (place[2], place[1])
    return 'node %s' % place[1]


def _places_of(pair: Dict[str, Any]) -> Set[Tuple[str, ...]]:
    return set(tuple(place) for place in F.places(pair_path(pair)) or [])


def _suspects(bad: List[Test], pairs: List[Dict[str, Any]]) -> Dict[Tuple[str, ...], Tuple[List[Test], Set[str]]]:
    """{place: (its informative tests, their peers)} of the devices every informative test through which
    is slow or failed, with two or more peers. One pass over the tests (a full mesh at scale is about a
    million): the informative tests through each candidate - those that passed, and the open ones (an
    explained failure tells nothing of another device)."""
    candidates = set(place for t in bad for place in t[2] if place[0] in _SPECIFIC)
    index: Dict[Tuple[str, ...], List[Test]] = dict((place, []) for place in candidates)
    for test in bad:
        for place in test[2] & candidates:
            index[place].append(test)
    for pair in pairs:
        if pair.get('verdict') == 'ok':
            for place in _places_of(pair) & candidates:
                index[place].append((pair, None, None))
    suspects = {}
    for place, through in index.items():
        if any(t[1] is None for t in through):
            continue
        peers = set(t[0]['client'] if t[0]['server'] == place[1] else t[0]['server'] for t in through)
        if len(peers) >= 2:
            suspects[place] = (through, peers)
    return suspects


def _device_finding(place: Tuple[str, ...], through: List[Test], peers: Set[str], windowed: AbstractSet[str] = frozenset()) -> Finding:
    """BENCH_DEVICE_UNEXPLAINED on ``place``, every test ``through`` it slow or failed. ``windowed``: the hosts whose
    tests had their window read (plugin_utils/bench/_window.py): there the PCIe link was sampled and its AER counters
    read under load and nothing rose (else a root explains it), so the remedy does not send the user to LnkSta."""
    host = place[1]
    rails = sorted(set(str(t[0].get('rail')) for t in through), key=natural_key)
    memories = sorted(set(str(t[0].get('memory')) for t in through))
    sides = sorted(set('server' if t[0]['server'] == host else 'client' for t in through))
    kinds = sorted(set(t[1]['code'] for t in through))
    words = _device_words(place, rails if place[0] == 'hca' else [])
    subject = {'hca': lambda: place[2], 'gpu_nic': lambda: '%s<->%s' % (place[2], place[3]),
               'gpu': lambda: place[2]}.get(place[0], lambda: 'node')()
    return finding(
        F.BENCH_DEVICE_UNEXPLAINED, host, subject,
        {'device': list(place), 'tests': len(through), 'peers': sorted(peers, key=natural_key), 'rails': rails,
         'memories': memories, 'sides': sides, 'codes': kinds,
         'subjects': sorted(t[1]['subject'] for t in through)[:20]},
        '%s is slow or failed in every test it is in (%d test(s) with %d peers: %s memory, as %s), and no finding on '
        'their path explains it' % (words, len(through), len(peers), ' and '.join(memories), ' and '.join(sides)),
        remedy={'gpu_nic': 'gpu_nic', 'gpu': 'gpu_nic', 'node': 'node'}.get(place[0], 'hca_windowed' if host in windowed else None),
        device=subject.replace('<->', ' and '), at=[place], path=[place])


def _cover(suspects: Dict[Tuple[str, ...], Tuple[List[Test], Set[str]]], windowed: AbstractSet[str] = frozenset()) -> Tuple[List[Finding], Set[int]]:
    """The devices that together cover the failing tests, each a finding: the device that covers the
    most tests not yet covered first; ties: the most specific, then by name. Returns (findings, ids of
    the tests covered)."""
    found: List[Finding] = []
    covered: Set[int] = set()
    while True:
        ranked = sorted(((len([t for t in through if id(t) not in covered]), place) for place, (through, _p) in suspects.items()),
                        key=lambda item: (-item[0], _SPECIFIC.index(item[1][0]), [natural_key(part) for part in item[1]]))
        if not ranked or ranked[0][0] == 0:
            return found, covered
        place = ranked[0][1]
        through, peers = suspects.pop(place)
        covered.update(id(t) for t in through)
        found.append(_device_finding(place, through, peers, windowed))


def unexplained_findings(findings: List[Finding], bench: Optional[Dict[str, Any]]) -> List[Finding]:
    """Pair symptoms that no root on their path explains, said once on the device all their tests
    share: a device (an HCA port, a GPU<->NIC path, a GPU, a node) every informative test through
    which is slow or failed, with two or more peers (one peer cannot tell which end it is). A
    test is informative when it passed, or failed with no root to explain it. Returns the new
    BENCH_DEVICE_UNEXPLAINED findings (their ``at`` the device); a symptom whose tests share no
    such device stays unexplained, and its cause says so - it is never pinned on a neighbour."""
    open_ = dict((f['subject'], f) for f in findings if f['code'] in PAIR_SYMPTOMS and f.get('hosts')
                 and f['explained_by'] is None and f['severity'] != 'info')
    if not open_:
        return []
    pairs = [p for p in (bench or {}).get('pairs') or [] if isinstance(p, dict) and p.get('server') and p.get('client')]
    bad = [(pair, open_[pair_subject(pair)], _places_of(pair)) for pair in pairs
           if pair.get('verdict') != 'ok' and pair_subject(pair) in open_]
    found, covered = _cover(_suspects(bad, pairs), set(str(h) for h in (bench or {}).get('windowed') or []))
    for pair, symptom, _places in (t for t in bad if id(t) not in covered):
        symptom['cause'] = '%s; no finding on its path explains it, and its failing tests share no device that fails with two ' \
            'or more peers: the fault is on this pair\'s path (either node\'s port, cable or PCIe path of rail %s); tests ' \
            'with more peers tell which end' % (symptom['cause'], pair.get('rail'))
    return found
