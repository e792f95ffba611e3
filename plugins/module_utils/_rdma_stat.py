# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""iproute2's ``rdma statistic show`` (``rdma stat show [link DEV/PORT]``, also ``-p``) -> counters per port.

The default layout is one record per port: 'link mlx5_0/1 rx_write_requests 0 rx_read_requests 0
...' (rdma/stat.c), which terminals and mail wrap anywhere - between a name and its value too; with
``-p`` each 'name value' pair is on its own line below 'link mlx5_0/1'. ``rdma stat qp show``
records add 'cntn 5 pid 31609 comm client.1' before the counters and 'LQPN: <178>' after them;
``rdma statistic mode`` adds 'Optional-set: name name'. The text is read as one stream of words:
'link' starts a record; after it, a counter is a name followed by a number. So the wrapping does
not matter, and nothing that is not a name and a number becomes a counter.

Proven on public printouts: tests/fixtures/public/rdma_stat.
"""

from __future__ import annotations

import re

MAX_BYTES = 1 << 20
# A node has a few dozen RDMA ports (64 with 8 HCAs of 8 VFs), each ~40 counters (mlx5 counters.c).
MAX_PORTS = 256
MAX_COUNTERS = 256
_PORT_RE = re.compile(r'[A-Za-z0-9_.\-]{1,64}/\d{1,3}\Z')
_NAME_RE = re.compile(r'[a-z][a-z0-9_]{0,63}\Z')
# Not counters: the QP record's own fields (rdma/stat.c res_counter_line: cntn, pid, comm, lqpn).
_NOT_COUNTERS = ('cntn', 'pid', 'comm', 'lqpn', 'link')
# A counter is a u64 (include/uapi/rdma/rdma_netlink.h RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE).
U64_MAX = (1 << 64) - 1


def parse_rdma_statistic(text: str | None) -> tuple:
    """-> ({'mlx5_0/1': {counter: int}}, truncated). A counter named twice for one port keeps its first value."""
    text = text or ''
    truncated = len(text) > MAX_BYTES
    words = text[:MAX_BYTES].split()
    ports: dict = {}
    current = None
    index, count = 0, len(words)
    while index < count:
        word = words[index]
        if word == 'link' and index + 1 < count:
            name = words[index + 1]
            current = None
            if _PORT_RE.match(name):
                if name not in ports and len(ports) >= MAX_PORTS:
                    truncated = True
                else:
                    current = ports.setdefault(name, {})
            index += 2
            continue
        if current is not None and index + 1 < count and _NAME_RE.match(word) and word not in _NOT_COUNTERS:
            value = words[index + 1]
            if value.isascii() and value.isdigit() and len(value) <= 20 and int(value) <= U64_MAX:
                if word not in current and len(current) < MAX_COUNTERS:
                    current[word] = int(value)
                index += 2
                continue
        index += 1
    return ports, truncated
