# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Render a simulated cluster (a list of node profiles with faults) and its inventory.

Two connection modes:
  local  - every node is an inventory host with ansible_connection=local and its
           own root and loopback address 127.0.1.N; needs no root (the demo);
  netns  - nodes are reached over real SSH at 10.251.0.(10+N), the lab that
           tests/lab/netns.sh brings up (root only).

Usage: python -m tests.sim.cluster SPEC.yml DEST --mode local|netns [--key PATH]
Writes DEST/roots/<node>/ and DEST/inventory.yml.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import yaml

try:
    from tests.sim import faults, render
except ImportError:  # run as a script from tests/sim
    import faults
    import render

HERE = os.path.dirname(os.path.abspath(__file__))
SIM_BIN = os.path.join(HERE, 'bin')
LAB_NET = '10.251.0.'
LAB_FIRST_HOST = 10


def load_spec(name_or_path):
    path = name_or_path if os.path.isfile(name_or_path) else os.path.join(HERE, 'clusters', name_or_path + '.yml')
    with open(path) as handle:
        return yaml.safe_load(handle)


def build(spec, dest, mode='local', key=None, python=None, extra_hosts=None):
    """Render every node of ``spec`` below ``dest``; returns the inventory dict."""
    hosts = {}
    for index, node in enumerate(spec['nodes'], start=1):
        profile = render.load_profile(node['profile'])
        profile['hostname'] = node['name']
        applied = []
        expect = []
        for fault in node.get('faults', []):
            name, _sep, target = fault.partition(':')
            context = faults.apply(profile, name, target or None)
            applied.append(fault)
            expect.extend([expr, value] for expr, value in faults.expectations(name, context))
        root = os.path.join(os.path.abspath(dest), 'roots', node['name'])
        render.render(profile, root)
        # The fault catalog's expectations travel with the host so that a test can
        # check what came back through Ansible against them.
        host = {'gpu_fabric_root': root, 'gpu_fabric_sim_profile': node['profile'],
                # The DCB stand-ins (tests/sim/bin/mlnx_qos, dcb) act on the simulated root: ask them.
                'gpu_fabric_qos_tools': 'always',
                # fabric_capture saves the nvidia-smi stand-in's outputs too (gpu_state_facts from_log offline).
                'gpu_fabric_gpu_tools': 'always',
                'gpu_fabric_sim_faults': applied, 'gpu_fabric_sim_expect': expect}
        # Stand-ins for the tools that act (modprobe, cpupower, ...) come first on PATH,
        # and learn which simulated node they act on from GF_SIM_ROOT.
        address = '127.0.1.%d' % index if mode == 'local' else '%s%d' % (LAB_NET, LAB_FIRST_HOST + index)
        host['gpu_fabric_environment'] = {
            'PATH': SIM_BIN + ':/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
            'GF_SIM_ROOT': root,
            # The node's own address: perftest stand-in servers bind it, so that nodes
            # sharing one machine (local mode) do not collide on a TCP port.
            'GF_SIM_ADDR': address,
            'GF_SIM_PYTHON': (python or sys.executable) if mode == 'local' else '/usr/bin/python3',
        }
        if mode == 'local':
            # No root here: nothing to become, every write lands below the node's root.
            host.update(ansible_connection='local', ansible_host=address,
                        ansible_python_interpreter=python or sys.executable, gpu_fabric_become=False)
        else:
            host.update(ansible_host=address, ansible_user='root',
                        ansible_ssh_private_key_file=key,
                        ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null',
                        ansible_python_interpreter='/usr/bin/python3')
        # A node's own switches (GF_SIM_NVLINK_GBS, a PATH without a tool, ...) and inventory variables
        # (fabric_collective_env, ...) from the spec.
        host['gpu_fabric_environment'].update(node.get('env') or {})
        host.update(node.get('vars') or {})
        if 'GF_SIM_FABRIC' not in host['gpu_fabric_environment']:
            # No switches in this cluster (tests/sim/fabric.py builds the fat tree that has them):
            # the infiniband-diags stand-ins would fail as on a node without umad access.
            host['gpu_fabric_discover_fabric'] = False
        hosts[node['name']] = host
    # For the mpirun stand-in: every node by inventory name and by address, with its root
    # and the environment its stand-ins see (fault switches such as GF_SIM_NCCL_WRONG).
    hosts_file = os.path.join(os.path.abspath(dest), 'sim_hosts.json')
    for host in hosts.values():
        host['gpu_fabric_environment']['GF_SIM_HOSTS'] = hosts_file
    write_hosts_file(hosts, hosts_file)
    hosts.update(extra_hosts or {})
    inventory = {'all': {'children': {'gpu_nodes': {'hosts': hosts}}}}
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle, sort_keys=False)
    return inventory


def write_hosts_file(hosts, path):
    """(Re)write the mpirun stand-in's host table from inventory host entries; a test that
    changes a node's gpu_fabric_environment after build() calls it again."""
    table = {}
    for name, host in hosts.items():
        if 'gpu_fabric_root' not in host:
            continue
        entry = {'root': host['gpu_fabric_root'], 'address': host['ansible_host'], 'hostname': name,
                 'env': dict((k, v) for k, v in host['gpu_fabric_environment'].items() if k.startswith('GF_SIM_'))}
        table[name] = table[host['ansible_host']] = entry
    with open(path, 'w') as handle:
        json.dump(table, handle, indent=1, sort_keys=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('spec')
    parser.add_argument('dest')
    parser.add_argument('--mode', choices=('local', 'netns'), default='local')
    parser.add_argument('--key', help='SSH private key of the netns lab')
    parser.add_argument('--python', help='interpreter for local-connection nodes')
    args = parser.parse_args(argv)
    os.makedirs(args.dest, exist_ok=True)
    build(load_spec(args.spec), args.dest, args.mode, args.key, args.python)
    return 0


if __name__ == '__main__':
    sys.exit(main())
