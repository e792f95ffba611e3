# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the functional tests share: a node tree's fingerprint and ansible-playbook's recap."""

from __future__ import annotations

import hashlib
import os
import re
import stat


def tree_hash(root):
    """Every path below root with its type, mode and content (or link target).

    Check mode must leave this unchanged on every simulated node.
    """
    digest = hashlib.sha256()
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(base, name)
            info = os.lstat(path)
            digest.update(('%s\0%o\0' % (os.path.relpath(path, root), info.st_mode)).encode())
            if stat.S_ISLNK(info.st_mode):
                digest.update(os.readlink(path).encode())
            elif stat.S_ISREG(info.st_mode):
                with open(path, 'rb') as handle:
                    digest.update(handle.read())
    return digest.hexdigest()


def recap(result):
    """PLAY RECAP of a finished ansible-playbook -> {host: {'ok': n, 'changed': n, 'failed': n, ...}}."""
    stats = {}
    for line in result.stdout.split('PLAY RECAP', 1)[-1].splitlines():
        match = re.match(r'^(\S+)\s+:\s+(.*)$', line)
        if match:
            stats[match.group(1)] = dict((k, int(v)) for k, v in re.findall(r'(\w+)=(\d+)', match.group(2)))
    return stats
