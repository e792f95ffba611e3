#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: nccl_facts
short_description: The NCCL settings a job gets on the node (configuration files, environment) and the NCCL release installed
version_added: 0.1.0
description:
  - Reads NCCL's configuration files as NCCL reads them (NCCL src/misc/param.cc) - C($NCCL_CONF_FILE) when the job's
    environment sets it, else C(~/.nccl.conf) of the user the collective runs as (the home of its passwd entry, not
    C($HOME)), then C(/etc/nccl.conf) - and applies NCCL's precedence - the environment wins over every file,
    C($NCCL_CONF_FILE) or C(~/.nccl.conf) over C(/etc/nccl.conf), the first line of a name in a file over later ones.
  - Each file is read bounded (1 MiB), only when it is a regular file; lines NCCL skips (no C(=), a name that is no
    variable, a name twice) are named in the file's C(ignored).
  - Finds the NCCL library (C(libnccl.so.2) on C(LD_LIBRARY_PATH), in C(NCCL_HOME)/lib and the usual library
    directories) and its release from its file name (C(libnccl.so.2.21.5)), else from the C(NCCL version X.Y.Z) string
    in the library; and the release of C(nccl.h) (C(NCCL_MAJOR), C(NCCL_MINOR), C(NCCL_PATCH)) the benchmark is built
    against.
  - Runs no external tool.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - hpc.gpu_fabric.root
  - hpc.gpu_fabric.root.facts
options:
  env:
    description:
      - The job's NCCL environment as the project gives it (C(fabric_collective_env)). Its C(NCCL_CONF_FILE) says
        which file NCCL reads instead of C(~/.nccl.conf), its C(LD_LIBRARY_PATH) and C(NCCL_HOME) where the library is.
      - On a live node the C(NCCL_*) variables of this module's own environment count too (the collective inherits
        them); C(env) wins over them.
    type: dict
    default: {}
  user:
    description:
      - The user the collective runs as, whose passwd entry gives the home directory of C(~/.nccl.conf).
      - Default the user this module runs as (the collective runs as the same one).
    type: str
  nccl_home:
    description:
      - The NCCL the benchmark was built against (C(NCCL_HOME) of nccl-tests' make); its C(include/nccl.h) and
        C(lib/libnccl.so.2) are looked at first.
    type: path
  library_dirs:
    description:
      - Directories to look for C(libnccl.so.2) in, instead of C(LD_LIBRARY_PATH) and the usual ones.
    type: list
    elements: path
'''

EXAMPLES = r'''
- name: Read the NCCL settings the collective will get
  hpc.gpu_fabric.nccl_facts:
    env: "{{ fabric_collective_env | default({}) }}"

- name: Show where NCCL_ALGO comes from
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpu_fabric_nccl.settings.NCCL_ALGO | default('not set') }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu_fabric_nccl:
      description: NCCL's settings and release on the node.
      type: dict
      contains:
        user:
          description: The user whose home directory holds C(~/.nccl.conf).
          type: str
        home:
          description: That home directory (its passwd entry), or null.
          type: str
        files:
          description:
            - The files NCCL reads, in its order, each with C(path), C(source) (C(NCCL_CONF_FILE), C(home), C(etc)),
              C(state) (C(read), C(absent), or why it was not read) and C(settings) ({NAME, value}); C(ignored) the
              lines NCCL skips.
          type: list
          elements: dict
        settings:
          description: '{NAME: {value, source}}: what NCCL gets, its precedence applied; C(source) C(environment) or the path of a file.'
          type: dict
        library:
          description: '{version, path, file, how} of C(libnccl.so.2), or null.'
          type: dict
        header:
          description: '{version, path} of C(nccl.h), or null.'
          type: dict
        not_read:
          description: '{part: why}: what could not be read (C(home), C(library), C(header), a file''s path).'
          type: dict
        root:
          description: The root the reads were made under.
          type: str
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._nccl_conf import read_nccl
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import without_surrogates
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot


def main():
    module = AnsibleModule(
        argument_spec=dict(root=dict(type='path', default='/'), env=dict(type='dict', default={}), user=dict(type='str'),
                           nccl_home=dict(type='path'), library_dirs=dict(type='list', elements='path')),
        supports_check_mode=True,
    )
    root = module.params['root']
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory: give / or the path of an unpacked node snapshot' % root)
    sysroot = SysRoot(root)
    env = {}
    if sysroot.live:
        # The collective inherits this environment (collective_bench adds fabric_collective_env to it).
        env.update((name, value) for name, value in os.environ.items()
                   if name.startswith(('NCCL_', 'RCCL_', 'MCCL_')) or name == 'LD_LIBRARY_PATH')
    env.update(module.params['env'] or {})
    facts = read_nccl(sysroot, env, module.params['user'], module.params['nccl_home'], module.params['library_dirs'])
    facts['root'] = root
    facts = without_surrogates(facts, sysroot.warn, 'gpu_fabric_nccl')
    for warning in sysroot.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={'gpu_fabric_nccl': facts})


if __name__ == '__main__':
    main()
