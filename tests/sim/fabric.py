# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A simulated InfiniBand fat tree beyond the nodes: switches, links, subnet managers and
port counters, with faults. The stand-ins of tests/sim/tools_ibdiags.py print it in the
real tools' formats (iblinkinfo, ibnetdiscover, sminfo, perfquery).

Default: the scale of a real pod - 2 spines, 4 leaves, 16 nodes with 8 rails (mlx5_0..7)
each, rail-optimised (leaf L serves rails 2L and 2L+1 of every node: 32 host ports), each
leaf with 4 up-links to each spine, NDR (4X 106.25 Gbps per lane). The master SM runs on
spine-1 (LID 1, priority 14).

Faults (``model(faults=...)``):
  degraded_switch_link  leaf-2's first up-link to spine-1 trained at 1X ("Could be 4X")
  missing_uplink        leaf-3's last up-link down (Down/Polling, no peer)
  sm_absent             the master SM stopped: sminfo's query times out
  sm_duplicated         a second master (another GUID, same priority) on spine-2, LID 2,
                        seen by the nodes of the second half (sysfs sm_lid 2)
  sm_standby_tie        a standby SM on spine-2 (LID 2) at the master's priority 14: no node's
                        sm_lid names it, only saquery SMIR (then sminfo 2) finds it
  sm_standby_not_active a second SM on spine-2 (LID 2, priority 13) in state NOTACTIVE: the
                        failover the admin counts on is not there
  flapping_link         the leaf port of gpu-05's mlx5_3 goes down and retrains between
                        any two counter reads (LinkDownedCounter +1, SymbolErrorCounter +500)
  subnet_port_errors    leaf-2's first up-link to spine-2, a port no pair test crosses (the pairs
                        of a rail stay on its leaf), counts symbol errors in steady state
                        (SymbolErrorCounter +2000 at the leaf port between any two reads)
  bring_up_errors       the trap: the discovering node booted 3 minutes ago (inside the grace
                        window) and the leaf port of gpu-03's mlx5_1 trains once while the
                        counters are read (LinkDownedCounter +1, SymbolErrorCounter +300):
                        bring-up, information only

Every fault's counters are seen by both perfquery and ibqueryerrors (``port_errors`` and
``flapping``, {'<switch>:<port>': {counter: step per read}}); ``uptime_s`` is the discovering
node's time since boot.

``write(model, path)`` stores the model as JSON for the stand-ins (GF_SIM_FABRIC), with a
state file next to it that counts perfquery reads (each read advances the flapping counters).
"""

from __future__ import annotations

import json
import os

FAULTS = ('degraded_switch_link', 'missing_uplink', 'sm_absent', 'sm_duplicated', 'sm_standby_tie', 'sm_standby_not_active',
          'flapping_link', 'subnet_port_errors', 'bring_up_errors')
# A node that has been up three days: far past any bring-up window.
UPTIME_S = 3 * 86400.0
# NDR: 4 lanes at 106.25 Gb/s signalling (rdma-core libibmad/dump.c mad_dump_linkspeedext()).
NDR_LANE_GBPS = 106.25
MASTER_GUID = '0x0000000000500001'
SECOND_MASTER_GUID = '0x0000000000500002'
STANDBY_GUID = '0x0000000000500003'


def _guid(prefix, index):
    return '0x%016x' % ((prefix << 24) + index)


def hostname(index):
    return 'gpu-%02d' % index


def model(nodes=16, rails=8, leaves=4, spines=2, uplinks_per_spine=4, faults=()):
    """The fabric as a dict: switches, hosts (HCAs with GUID and LID), links, SMs, counters."""
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise ValueError('unknown fabric fault(s): %s' % ', '.join(sorted(unknown)))
    rails_per_leaf = max(1, rails // leaves)
    switches, links = {}, []
    lid = 1
    for s in range(1, spines + 1):
        switches['spine-%d' % s] = {'name': 'spine-%d' % s, 'guid': _guid(0x50, s), 'lid': lid,
                                    'desc': 'MF0;spine-%d:MQM9700/U1' % s, 'ports': leaves * uplinks_per_spine}
        lid += 1
    for l in range(1, leaves + 1):
        switches['leaf-%d' % l] = {'name': 'leaf-%d' % l, 'guid': _guid(0x51, l), 'lid': lid,
                                   'desc': 'MF0;leaf-%d:MQM9700/U1' % l,
                                   'ports': nodes * rails_per_leaf + spines * uplinks_per_spine}
        lid += 1
    hosts = {}
    lid = 100
    for n in range(1, nodes + 1):
        name = hostname(n)
        hcas = []
        for r in range(rails):
            hcas.append({'name': 'mlx5_%d' % r, 'guid': _guid(0x100000 + n, r + 1), 'lid': lid, 'rail': r})
            lid += 1
        hosts[name] = {'name': name, 'hcas': hcas}
    # Host links: rail r of node n -> leaf (r // rails_per_leaf) + 1, port (r % rails_per_leaf) * nodes + n.
    for n in range(1, nodes + 1):
        for hca in hosts[hostname(n)]['hcas']:
            leaf = 'leaf-%d' % (hca['rail'] // rails_per_leaf + 1)
            port = (hca['rail'] % rails_per_leaf) * nodes + n
            links.append(_link(('host', hostname(n), hca['name']), 1, ('switch', leaf), port))
    # Up-links: leaf l port (nodes*rails_per_leaf + k) -> spine s port ((l-1)*uplinks_per_spine + j).
    for l in range(1, leaves + 1):
        k = nodes * rails_per_leaf
        for s in range(1, spines + 1):
            for j in range(1, uplinks_per_spine + 1):
                k += 1
                links.append(_link(('switch', 'leaf-%d' % l), k, ('switch', 'spine-%d' % s), (l - 1) * uplinks_per_spine + j))
    sms = [{'lid': 1, 'guid': MASTER_GUID, 'priority': 14, 'state': 3, 'activity': 4484381, 'alive': True}]
    sm_lid_of = dict((name, 1) for name in hosts)
    flapping = {}
    if 'degraded_switch_link' in faults and leaves >= 2:
        link = _uplinks(links, 'leaf-2')[0]
        link.update(width=1, could_width=4)
    if 'missing_uplink' in faults and leaves >= 3:
        link = _uplinks(links, 'leaf-3')[-1]
        link.update(state='Down', phys='Polling')
    if 'sm_absent' in faults:
        sms[0]['alive'] = False
    if 'sm_duplicated' in faults:
        sms.append({'lid': 2, 'guid': SECOND_MASTER_GUID, 'priority': 14, 'state': 3, 'activity': 912, 'alive': True})
        for index, name in enumerate(sorted(hosts)):
            if index >= len(hosts) // 2:
                sm_lid_of[name] = 2
    if 'sm_standby_tie' in faults:
        sms.append({'lid': 2, 'guid': STANDBY_GUID, 'priority': 14, 'state': 2, 'activity': 0, 'alive': True})
    if 'sm_standby_not_active' in faults:
        sms.append({'lid': 2, 'guid': STANDBY_GUID, 'priority': 13, 'state': 0, 'activity': 0, 'alive': True})
    if 'flapping_link' in faults and nodes >= 5 and rails >= 4:
        for link in links:
            if link['a'][:3] == ('host', hostname(5), 'mlx5_3'):
                flapping['%s:%d' % (link['b'][1], link['b_port'])] = {'link_downed': 1, 'symbol_error': 500}
    port_errors, uptime_s = {}, UPTIME_S
    if 'subnet_port_errors' in faults and leaves >= 2 and spines >= 2:
        link = [up for up in _uplinks(links, 'leaf-2') if up['b'] == ('switch', 'spine-2')][0]
        port_errors['leaf-2:%d' % link['a_port']] = {'symbol_error': 2000}
    if 'bring_up_errors' in faults and nodes >= 3 and rails >= 2:
        uptime_s = 180.0
        for link in links:
            if link['a'][:3] == ('host', hostname(3), 'mlx5_1'):
                port_errors['%s:%d' % (link['b'][1], link['b_port'])] = {'link_downed': 1, 'symbol_error': 300}
    return {'switches': switches, 'hosts': hosts, 'links': links, 'sms': sms, 'sm_lid_of': sm_lid_of,
            'flapping': flapping, 'port_errors': port_errors, 'uptime_s': uptime_s,
            'lane_gbps': NDR_LANE_GBPS, 'faults': sorted(faults)}


def counter_steps(fab, key):
    """{counter: step per read} of the switch port ``key`` ('<switch>:<port>') under every fault."""
    steps = dict(fab.get('flapping', {}).get(key, {}))
    for counter, step in fab.get('port_errors', {}).get(key, {}).items():
        steps[counter] = steps.get(counter, 0) + step
    return steps


def _link(a, a_port, b, b_port):
    return {'a': a, 'a_port': a_port, 'b': b, 'b_port': b_port, 'width': 4, 'could_width': None,
            'state': 'Active', 'phys': 'LinkUp'}


def _uplinks(links, leaf):
    return [link for link in links if link['a'] == ('switch', leaf) and link['b'][0] == 'switch']


def write(fabric, path):
    """Store the model for the stand-ins; returns ``path``."""
    with open(path, 'w') as handle:
        json.dump(fabric, handle, indent=None, sort_keys=True)
    state = path + '.state'
    with open(state, 'w') as handle:
        json.dump({'perfquery_reads': {}}, handle)
    return path


def load(path):
    with open(path) as handle:
        fabric = json.load(handle)
    for link in fabric['links']:
        link['a'], link['b'] = tuple(link['a']), tuple(link['b'])
    return fabric


def node_facts(fabric, base_facts, name):
    """A node's ib_link_facts of this fabric: ``base_facts`` (one node's facts of the
    nvidia_h100_8x_ndr profile) with the GUIDs, LIDs, node descriptions and SM LID of ``name``."""
    import copy
    facts = copy.deepcopy(base_facts)
    hcas = dict((h['name'], h) for h in fabric['hosts'][name]['hcas'])
    for device in (facts.get('ib') or {}).get('devices') or []:
        hca = hcas.get(device['name'])
        if hca is None:
            continue
        device['node_guid'] = _sysfs_guid(hca['guid'])
        device['node_desc'] = '%s %s' % (name, device['name'])
        for port in device.get('ports') or []:
            port['lid'] = hca['lid']
            port['sm_lid'] = fabric['sm_lid_of'][name]
    return facts


def _sysfs_guid(value):
    digits = '%016x' % int(value, 16)
    return ':'.join(digits[i:i + 4] for i in range(0, 16, 4))


def patch_root(fabric, root, name):
    """Write this fabric's GUIDs, LIDs, node descriptions and SM LID into a rendered node root."""
    base = os.path.join(root, 'sys/class/infiniband')
    for hca in fabric['hosts'][name]['hcas']:
        dev = os.path.join(base, hca['name'])
        if not os.path.isdir(dev):
            continue
        for attr, value in (('node_guid', _sysfs_guid(hca['guid'])), ('sys_image_guid', _sysfs_guid(hca['guid'])),
                            ('node_desc', '%s %s' % (name, hca['name']))):
            with open(os.path.join(dev, attr), 'w') as handle:
                handle.write(value + '\n')
        port = os.path.join(dev, 'ports/1')
        _write_uptime(root, fabric.get('uptime_s', UPTIME_S))
        for attr, value in (('lid', '0x%x' % hca['lid']), ('sm_lid', '0x%x' % fabric['sm_lid_of'][name])):
            with open(os.path.join(port, attr), 'w') as handle:
                handle.write(value + '\n')


def _write_uptime(root, seconds):
    """/proc/uptime of a rendered node root: seconds since boot and idle seconds (proc(5))."""
    os.makedirs(os.path.join(root, 'proc'), exist_ok=True)
    with open(os.path.join(root, 'proc/uptime'), 'w') as handle:
        handle.write('%.2f %.2f\n' % (seconds, seconds * 7))


def build(dest, faults=(), node_faults=None, python=None, **shape):
    """Render the pod below ``dest`` for local-mode Ansible (tests/sim/cluster.py), with the
    fabric's stand-ins on PATH: returns (inventory dict, fabric path)."""
    from tests.sim import cluster
    fabric = model(faults=faults, **shape)
    path = write(fabric, os.path.join(os.path.abspath(dest), 'fabric.json'))
    spec = {'nodes': [{'name': name, 'profile': 'nvidia_h100_8x_ndr', 'faults': list((node_faults or {}).get(name, [])),
                       'env': {'GF_SIM_FABRIC': path}} for name in sorted(fabric['hosts'])]}
    inventory = cluster.build(spec, dest, 'local', python=python)
    for name, host in inventory['all']['children']['gpu_nodes']['hosts'].items():
        patch_root(fabric, host['gpu_fabric_root'], name)
    return inventory, path
