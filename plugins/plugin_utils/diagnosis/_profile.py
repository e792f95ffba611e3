# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A node's speed profile: every fact the run recorded that can shape how fast the node moves
data, flat, with how much each can cost; and the one comparison of a node's profile with its
peers' (or with its own earlier healthy report's), which the differential diagnosis
(rules/_differential.py) names.

A key is '<source>/<device or ->/<attribute>' ('run/-/NCCL_PROTO', 'gpu/GPU1/processes',
'ib/mlx5_0/fw_ver', 'host/-/kernel'): its source says which facts it comes from (SOURCES), its
device where it holds for one GPU or HCA only ('-': the whole node). Cost and label follow from
the key alone (describe), so a profile read back from a report.json of another run is judged
with this code's costs, never with what that file says.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import natural_key

Profile = Dict[str, Any]

# Where a key's value comes from, in words (a source a node lacks is named in ``not_read``).
SOURCES = {
    'run': "NCCL's log of the node's own collective run (its settings and version)",
    'gpu': "the GPUs' state (gpu_state_facts: processes, clocks, NVLink, PCIe link, driver)",
    'conf': "NCCL's settings and library read on the node (nccl_facts)",
    'ib': 'the HCAs (ib_link_facts: firmware, port rates)',
    'host': 'the host (gdr_facts: kernel, OFED, peer memory, CPU governor, IOMMU, modules)',
}
COSTS = ('high', 'medium', 'low')
# A value longer than this is cut: a profile is compared and shown, never parsed further.
VALUE_MAX = 200
# At most this many keys are read from a profile of another run (a report.json given as a baseline).
KEYS_MAX = 4096

# NCCL variables that change how NCCL moves data: its algorithms, protocols, channels, buffers, and the
# transports it may use (NCCL's documentation, docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html:
# "Performance tuning" and the P2P/SHM/NET sections). A difference in one of them costs bandwidth by itself:
# NCCL_MAX_NCHANNELS=1 ran 8.21 against 79.36 GB/s, NCCL_PROTO=LL 43.55 on two H200
# (tests/fixtures/real/h200x2/state/README.md).
NCCL_TUNING = frozenset((
    'NCCL_ALGO', 'NCCL_PROTO', 'NCCL_MIN_NCHANNELS', 'NCCL_MAX_NCHANNELS', 'NCCL_MIN_CTAS', 'NCCL_MAX_CTAS', 'NCCL_NTHREADS',
    'NCCL_BUFFSIZE', 'NCCL_LL_BUFFSIZE', 'NCCL_LL128_BUFFSIZE', 'NCCL_P2P_DISABLE', 'NCCL_P2P_LEVEL', 'NCCL_SHM_DISABLE',
    'NCCL_NET_GDR_LEVEL', 'NCCL_NET_GDR_READ', 'NCCL_IB_DISABLE', 'NCCL_IB_HCA', 'NCCL_NVLS_ENABLE', 'NCCL_CUMEM_ENABLE',
    'NCCL_P2P_NET_CHUNKSIZE', 'NCCL_P2P_NVL_CHUNKSIZE', 'NCCL_P2P_PCI_CHUNKSIZE', 'NCCL_CROSS_NIC', 'NCCL_IB_QPS_PER_CONNECTION',
    'NCCL_IB_SPLIT_DATA_ON_QPS', 'NCCL_NET', 'NCCL_COLLNET_ENABLE', 'NCCL_P2P_USE_CUDA_MEMCPY', 'NCCL_NCHANNELS_PER_NET_PEER',
    'NCCL_MIN_P2P_NCHANNELS', 'NCCL_MAX_P2P_NCHANNELS', 'NCCL_SOCKET_NTHREADS', 'NCCL_NSOCKS_PERTHREAD', 'NCCL_DMABUF_ENABLE',
    'NCCL_GRAPH_FILE', 'NCCL_TOPO_FILE', 'NCCL_IGNORE_CPU_AFFINITY', 'NCCL_NET_SHARED_BUFFERS', 'NCCL_SHM_USE_CUDA_MEMCPY'))
# What only changes what NCCL prints.
NCCL_COSMETIC = ('NCCL_DEBUG',)

# (source, attribute) -> (cost, label); '%s' in a label is the device. Attributes of NCCL variables are their names.
_ATTRIBUTES: Dict[Tuple[str, str], Tuple[str, str]] = {
    ('run', 'nccl_version'): ('medium', 'the NCCL release the run loaded'),
    ('conf', 'library'): ('medium', 'the NCCL library on the node'),
    ('conf', 'header'): ('low', "nccl.h of the node's nccl-tests"),
    ('gpu', 'driver'): ('medium', 'the GPU driver'),
    ('gpu', 'processes'): ('high', 'processes on %s'),
    ('gpu', 'clock_reasons'): ('high', 'clock limits active on %s (throttle reasons)'),
    ('gpu', 'nvlink'): ('high', 'NVLink links of %s'),
    ('gpu', 'pcie_width'): ('high', 'PCIe link width of %s'),
    ('gpu', 'power_limit_w'): ('high', 'power limit of %s (W)'),
    ('gpu', 'sm_clock_max_mhz'): ('high', 'maximum SM clock of %s (MHz)'),
    ('gpu', 'mem_clock_max_mhz'): ('high', 'maximum memory clock of %s (MHz)'),
    ('gpu', 'remap_pending'): ('medium', 'row remaps pending on %s'),
    ('gpu', 'vbios'): ('medium', 'VBIOS of %s'),
    ('gpu', 'name'): ('low', 'model of %s'),
    ('ib', 'fw_ver'): ('medium', 'firmware of %s'),
    ('ib', 'rate'): ('high', 'port rates of %s'),
    ('ib', 'model'): ('low', 'model of %s'),
    ('host', 'kernel'): ('medium', 'the kernel'),
    ('host', 'ofed'): ('medium', 'the OFED release'),
    ('host', 'peer_memory'): ('medium', 'the peer-memory module (and its client version)'),
    ('host', 'cpu_governor'): ('medium', 'the CPU frequency governor'),
    ('host', 'iommu'): ('medium', 'the IOMMU mode'),
    ('host', 'modules'): ('low', 'the kernel modules loaded'),
    ('host', 'peer_memory_build'): ('medium', 'the peer-memory modules and the driver each was built for'),
}


def _text(value: Any) -> Optional[str]:
    """A fact as the profile keeps it: a short string; None for no value."""
    if value is None or value == '' or value == []:
        return None
    if isinstance(value, (list, tuple)):
        value = ', '.join(str(item) for item in value)
    return str(value)[:VALUE_MAX]


def _mapping(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> List[Dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def describe(key: str) -> Tuple[str, str]:
    """(cost, label) of a profile key: 'high', 'medium' or 'low', and what it is in words."""
    source, device, attribute = (key.split('/', 2) + ['', ''])[:3]
    if source in ('run', 'conf') and attribute.startswith('NCCL_'):
        where = "NCCL's log of the run" if source == 'run' else "the node's NCCL settings"
        if attribute in NCCL_TUNING:
            return 'high', '%s (%s)' % (attribute, where)
        if attribute in NCCL_COSMETIC or attribute.startswith('NCCL_DEBUG_'):
            return 'low', '%s (%s)' % (attribute, where)
        # A variable this code does not know may still change what NCCL does: not a cosmetic one.
        return 'medium', '%s (%s; not one of the tuning variables this project knows)' % (attribute, where)
    cost, label = _ATTRIBUTES.get((source, attribute), ('low', key))
    return cost, (label % device if '%s' in label else label)


def _run_values(run: Dict[str, Any]) -> Dict[str, Optional[str]]:
    """NCCL's settings the run saw (its log's ENV lines, which cover the environment and the
    configuration files, over the environment the run was given) and the release it loaded."""
    values: Dict[str, Optional[str]] = {}
    given = _mapping(run.get('env'))
    logged = _mapping(_mapping(run.get('transport')).get('env'))
    for name in list(given) + list(logged):
        if str(name).startswith('NCCL_'):
            values['run/-/%s' % str(name)[:80]] = _text(logged.get(name, given.get(name)))
    values['run/-/nccl_version'] = _text(_mapping(run.get('versions')).get('library_version'))
    return values


def _gpu_names(gdr: Dict[str, Any]) -> Dict[str, str]:
    """{bdf: the GPU's name in gpu_fabric_gdr ('GPU2')}: one name for a GPU across all facts."""
    return dict((str(gpu.get('pci_address')).lower(), str(gpu.get('name'))) for gpu in _items(gdr.get('gpus'))
                if gpu.get('pci_address') and gpu.get('name'))


def _gpu_entry(name: str, gpu: Dict[str, Any], values: Dict[str, Optional[str]]) -> None:
    for attribute in ('name', 'vbios', 'power_limit_w', 'sm_clock_max_mhz', 'mem_clock_max_mhz', 'pcie_width'):
        values['gpu/%s/%s' % (name, attribute)] = _text(gpu.get(attribute))
    # An idle GPU says so ('gpu_idle'): that changes with load, not with the node.
    reasons = sorted(str(r) for r in gpu.get('clock_reasons') or [] if r != 'gpu_idle') if isinstance(gpu.get('clock_reasons'), list) else None
    values['gpu/%s/clock_reasons' % name] = ', '.join(reasons) if reasons else ('none' if reasons is not None else None)
    nvlink = gpu.get('nvlink')
    if isinstance(nvlink, dict) and nvlink.get('links') is not None:
        values['gpu/%s/nvlink' % name] = '%s of %s active' % (nvlink.get('active'), nvlink.get('links'))
    pending = [gpu.get('retired_pages_pending'), gpu.get('remapped_rows_pending')]
    if any(p is not None for p in pending):
        values['gpu/%s/remap_pending' % name] = 'yes' if any(pending) else 'no'


def _gpu_values(gpu_facts: Dict[str, Any], gdr: Dict[str, Any], not_read: Dict[str, str]) -> Dict[str, Optional[str]]:
    values: Dict[str, Optional[str]] = {'gpu/-/driver': _text(gpu_facts.get('driver_version'))}
    names = _gpu_names(gdr)
    by_bdf: Dict[str, str] = {}
    for position, gpu in enumerate(_items(gpu_facts.get('gpus'))):
        bdf = str(gpu.get('bdf') or '').lower()
        name = names.get(bdf) or 'GPU%s' % (gpu.get('index') if gpu.get('index') is not None else position)
        by_bdf[bdf] = name
        _gpu_entry(name, gpu, values)
    parts = _mapping(gpu_facts.get('not_read'))
    for part, why in sorted(parts.items()):
        not_read['gpu %s' % part] = _text(why) or 'not read'
    if 'processes' not in parts and 'gpus' not in parts:
        found: Dict[str, List[str]] = dict((name, []) for name in by_bdf.values())
        for process in _items(gpu_facts.get('processes')):
            owner = by_bdf.get(str(process.get('bdf') or '').lower())
            if owner is not None:
                found[owner].append(str(process.get('name') or 'pid %s' % process.get('pid'))[:60])
        for name, seen in found.items():
            values['gpu/%s/processes' % name] = ', '.join(sorted(set(seen))) or 'none'
    return values


def _conf_values(nccl: Dict[str, Any], not_read: Dict[str, str]) -> Dict[str, Optional[str]]:
    values: Dict[str, Optional[str]] = {}
    for name, setting in _mapping(nccl.get('settings')).items():
        if str(name).startswith('NCCL_'):
            values['conf/-/%s' % str(name)[:80]] = _text(_mapping(setting).get('value'))
    for part in ('library', 'header'):
        values['conf/-/%s' % part] = _text(_mapping(nccl.get(part)).get('version'))
    for part, why in sorted(_mapping(nccl.get('not_read')).items()):
        not_read['nccl %s' % part] = _text(why) or 'not read'
    return values


def _ib_values(ib: Dict[str, Any]) -> Dict[str, Optional[str]]:
    values: Dict[str, Optional[str]] = {}
    for device in _items(ib.get('devices')):
        name = str(device.get('name'))
        values['ib/%s/fw_ver' % name] = _text(device.get('fw_ver'))
        values['ib/%s/model' % name] = _text(device.get('hca_type'))
        rates = ['%s %s' % (port.get('port'), port.get('rate_gbps')) for port in _items(device.get('ports'))]
        values['ib/%s/rate' % name] = _text(rates)
    return values


def _host_values(gdr: Dict[str, Any]) -> Dict[str, Optional[str]]:
    host = _mapping(gdr.get('host'))
    nvidia = _mapping(_mapping(_mapping(gdr.get('peer_memory')).get('paths')).get('nvidia'))
    governors = _mapping(host.get('cpu_governors'))
    return {'host/-/kernel': _text(_mapping(gdr.get('kernel')).get('release')),
            'host/-/ofed': _text(_mapping(gdr.get('ofed')).get('version')),
            'host/-/peer_memory': _text(' '.join(str(p) for p in (nvidia.get('module_loaded'), nvidia.get('client_version')) if p)),
            'host/-/cpu_governor': _text(sorted(str(name) for name in governors)),
            'host/-/iommu': _text(_mapping(gdr.get('iommu')).get('mode')),
            'host/-/modules': _text(sorted(str(m) for m in host.get('modules_loaded') or [])) if isinstance(host.get('modules_loaded'), list) else None,
            # What each peer-memory module was built for against the driver loaded (gdr_facts' peer_memory_build, where read).
            'host/-/peer_memory_build': _text(sorted('%s %s for driver %s' % (b.get('module'), b.get('loaded_version'), b.get('driver_version'))
                                                     for b in _items(gdr.get('peer_memory_build'))))}


def profile(node: Any, run: Any = None) -> Profile:
    """The speed profile of a node: {'values': {key: value}, 'not_read': {source: why}}.

    ``node``: the node's facts as the diagnosis has them ({'ib', 'gdr', 'gpu', 'nccl'}); ``run``: its own
    collective run where it had one (collective.nodes.hosts.<node>). A source the node did not give is in
    ``not_read`` and none of its keys is compared."""
    node = _mapping(node)
    not_read: Dict[str, str] = {}
    values: Dict[str, Optional[str]] = {}
    sources = (('run', run, _run_values),
               ('gpu', node.get('gpu'), lambda facts: _gpu_values(facts, _mapping(node.get('gdr')), not_read)),
               ('conf', node.get('nccl'), lambda facts: _conf_values(facts, not_read)),
               ('ib', node.get('ib'), _ib_values), ('host', node.get('gdr'), _host_values))
    for source, facts, read in sources:
        if isinstance(facts, dict) and facts:
            values.update(read(facts))
        else:
            not_read[source] = 'not recorded in this run'
    return {'values': dict((key, value) for key, value in sorted(values.items()) if value is not None), 'not_read': not_read}


def from_report(value: Any) -> Optional[Profile]:
    """A profile read back from a report.json (hosts.<node>.profile of another run), bounded; None
    where it is none."""
    value = _mapping(value)
    values, not_read = value.get('values'), value.get('not_read')
    if not isinstance(values, dict) or not isinstance(not_read, dict):
        return None
    keys = [key for key in values if isinstance(key, str) and key.split('/', 1)[0] in SOURCES][:KEYS_MAX]
    return {'values': dict((key[:VALUE_MAX], str(values[key])[:VALUE_MAX]) for key in keys if values[key] is not None),
            'not_read': dict((str(k)[:VALUE_MAX], str(v)[:VALUE_MAX]) for k, v in list(not_read.items())[:len(SOURCES) * 8])}


def _read(item: Profile, source: str) -> bool:
    return source not in item['not_read']


def _part(key: str) -> Optional[str]:
    """The part of the GPUs' state (gpu_state_facts: its ``not_read`` names) a key comes from, where the tool reads it apart."""
    source, device, attribute = (key.split('/', 2) + ['', ''])[:3]
    if source != 'gpu' or device == '-':
        return None
    return {'processes': 'gpu processes', 'nvlink': 'gpu nvlink'}.get(attribute, 'gpu gpus')


def _in_scope(key: str, sources: Sequence[str], device: Optional[str]) -> bool:
    source, on = (key.split('/', 2) + [''])[:2]
    return source in sources and (device is None or on in ('-', device))


def _theirs(values: List[Optional[str]]) -> Tuple[Optional[str], List[str]]:
    """The value a strict majority of the references holds (None: no majority), and every value seen."""
    counts = Counter('not set' if value is None else value for value in values).most_common()
    seen = sorted(value for value, _count in counts)
    return (counts[0][0] if counts and counts[0][1] * 2 > len(values) else None), seen


def _not_compared(mine: Profile, references: Sequence[Profile], sources: Sequence[str]) -> Dict[str, str]:
    """{source or part: why} of what is not compared: not read on the node, or on none of its references."""
    not_compared: Dict[str, str] = {}
    for source in sources:
        if not _read(mine, source):
            not_compared[source] = 'not read on this node: %s' % mine['not_read'][source]
        elif not [ref for ref in references if _read(ref, source)]:
            not_compared[source] = 'not read on %s' % ('the baseline' if len(references) == 1 else 'its peers')
    prefixes = [{'conf': 'nccl'}.get(source, source) for source in sources]
    for part, why in sorted(mine['not_read'].items()):
        if part not in SOURCES and part.split(' ', 1)[0] in prefixes:
            not_compared[part] = why
    return not_compared


def _difference(key: str, mine: Profile, references: Sequence[Profile], not_compared: Dict[str, str]) -> Optional[Dict[str, Any]]:
    """The difference of one key ({key, label, cost, mine, theirs}), or None."""
    source, part = key.split('/', 1)[0], _part(key)
    if source in not_compared or (part is not None and part in not_compared):
        return None
    values = [ref['values'].get(key) for ref in references if _read(ref, source) and (part is None or part not in ref['not_read'])]
    if not values:
        return None
    majority, seen = _theirs(values)
    value = str(mine['values'].get(key) or 'not set')
    if (majority is not None and value == majority) or (majority is None and value in seen):
        return None
    cost, label = describe(key)
    return {'key': key, 'label': label, 'cost': cost, 'mine': value, 'theirs': majority or ' or '.join(seen)}


def differences(mine: Profile, references: Sequence[Profile], sources: Sequence[str] = tuple(SOURCES),
                device: Optional[str] = None) -> Tuple[List[Dict[str, Any]], Dict[str, str]]:
    """What differs between ``mine`` and its ``references`` (healthy peers, or one earlier healthy
    report of the node): each key of ``sources`` (of ``device`` and the whole node, where given) that
    both sides read, where ``mine`` is not what most references hold (or, without a majority, none of
    what they hold), ranked by cost then key. Returns (differences [{key, label, cost, mine, theirs}],
    {source: why} of the sources not compared)."""
    not_compared = _not_compared(mine, references, sources)
    keys = set(key for item in [mine] + list(references) for key in item['values'] if _in_scope(key, sources, device))
    found = [item for item in (_difference(key, mine, references, not_compared) for key in keys) if item is not None]
    found.sort(key=lambda item: (COSTS.index(item['cost']), [natural_key(part) for part in item['key'].split('/')]))
    return found, not_compared


# A local run's verdicts of a healthy node (module_utils/_collective.py judge_nodes): a warning is below the healthy
# share of its NVLink but above NVLINK_LOW_RATIO, which a ring that does not use every link of a GPU reaches on some
# topologies (module_utils/_collective.py): such nodes are peers to compare with (and a baseline), a low one is not.
HEALTHY_STATUS = ('ok', 'measured', 'warning')


def baseline_run(baseline: Dict[str, Any], host: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(the node's own run in the baseline report, None) or (None, why it cannot be used)."""
    if baseline.get('error'):
        return None, str(baseline['error'])[:300]
    report = _mapping(_mapping(baseline.get('hosts')).get(host))
    run = _mapping(_mapping(_mapping(_mapping(baseline.get('collective')).get('nodes')).get('hosts')).get(host))
    # Matched by inventory name only: another host's report could be of other hardware (docs/report.md).
    if not report or not run:
        return None, 'the baseline holds no %s of %s (a baseline is matched by inventory name)' % (
            'collective run of its own (launcher local)' if report else 'report', host)
    verdict = _mapping(run.get('verdict'))
    why = []
    # Its own run decides, not the node's status: a finding elsewhere on the node (a storage port down) leaves
    # its GPUs' run a fair measure of them.
    if verdict.get('status') not in HEALTHY_STATUS or run.get('slow'):
        why.append('its own run there was %s' % ('slow against its peers' if run.get('slow') else str(verdict.get('status'))[:40]))
    busbw = run.get('busbw_gbs')
    # Python's JSON reader takes NaN and Infinity: another run's file is read as numbers only where they are finite.
    if not isinstance(busbw, (int, float)) or isinstance(busbw, bool) or not math.isfinite(busbw) or busbw <= 0:
        why.append('its run there measured no busbw')
    if why:
        return None, 'the baseline run of %s was not healthy: %s' % (host, '; '.join(why))
    return run, None
