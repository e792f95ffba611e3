# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The checkout's ansible.cfg is used by whoever runs from it, on real clusters: SSH host keys
stay checked there; only the test lab's throw-away nodes go without, in their own inventories."""

from __future__ import annotations

import configparser
import os

import yaml

from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_checkout_keeps_host_key_checking_on():
    config = configparser.ConfigParser()
    assert config.read(os.path.join(REPO, 'ansible.cfg'))
    for section in config.sections():
        for key, value in config.items(section):
            assert key != 'host_key_checking' or value.strip().lower() in ('true', 'yes', '1', 'on'), (section, key, value)
            assert 'stricthostkeychecking=no' not in value.replace(' ', '').lower(), (section, key, value)


def test_the_lab_sets_what_its_nodes_need_itself(tmp_path):
    """The netns lab (tests/lab/netns.sh) and the molecule netns scenario: their nodes' host keys
    are made at each start, so their inventories skip the check for those nodes only."""
    inventory = cluster.build({'nodes': [{'name': 'n1', 'profile': 'no_rdma_vm'}]}, str(tmp_path / 'sim'), 'netns',
                              key=str(tmp_path / 'key'))
    common = inventory['all']['children']['gpu_nodes']['hosts']['n1']['ansible_ssh_common_args']
    assert 'StrictHostKeyChecking=no' in common and 'UserKnownHostsFile=/dev/null' in common
    with open(os.path.join(REPO, 'molecule', 'netns', 'molecule.yml')) as handle:
        scenario = yaml.safe_load(handle)
    common = scenario['provisioner']['inventory']['group_vars']['all']['ansible_ssh_common_args']
    assert 'StrictHostKeyChecking=no' in common and 'UserKnownHostsFile=/dev/null' in common
