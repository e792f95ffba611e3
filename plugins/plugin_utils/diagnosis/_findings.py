# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The registry of finding codes: the one place that says, per code, its layer, its severity,
what it explains, what fixes it and what it means.

The rules (plugins/plugin_utils/diagnosis/_diagnose.py, _fleet.py, ...) make findings through ``finding()``, which refuses a code not registered here and
takes the layer, the severity and the remedy from here; ``link_causes`` reads EXPLAINS; the
codes table of docs/report.md is ``markdown_rows()`` (tests/unit/plugins/module_utils/test__findings.py
compares them).
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

# A finding (docs/report.md, findings[]): a JSON object; a place: ('node', host), ('hca', host, hca), ...
Finding = Dict[str, Any]
Place = Sequence[Any]

LAYERS = ('ib', 'ib_gpu', 'host', 'benchmark', 'collective')
SEVERITIES = ('info', 'warning', 'error')

# layers: the first is the default, the others allowed; severity: the default; other: {severity:
# when} - the other severities a rule may give it, and when (the docs table says it);
# explains: {symptom code: None, or (predicate over the symptom finding, when)}; remedy: the
# default template (%(name)s from the finding's host, subject and the rule's values);
# remedies: {variant: template} that a rule names instead; scope: where a finding of the code sits
# when its rule names no place (SCOPES: 'node' its host, 'fabric' the subnet, 'run' the run), None
# where only the rule can say (an HCA, a GPU<->NIC path, a link); gpu_memory: the fault breaks GPUDirect
# RDMA or costs GPU memory only (the node's GPU-memory tests, not its host-memory ones): where a
# symptom says GPU memory was slower than host memory or GPUDirect RDMA was not used, such a root
# is what it names (named()).
# roles: what other parts of the diagnosis read a finding of the code as (ROLES; codes_with() lists the
# codes of a role, so that a new code with the role is read like the others).
ROLES = {
    'port': 'a port\'s own finding (the fleet rule does not name that port again, _fleet.PORT_CODES)',
    'port_owned': 'a port down or slower than its peers: the fleet rule counts it as that port\'s (_fleet.OWNED_PORT_CODES)',
    'gpudirect': 'a node\'s GPUDirect RDMA finding (the fleet rule leaves the difference to it, _fleet.GDR_CODES)',
    'no_rdma': 'says a node has no RDMA device at all (_fleet.NO_RDMA_CODES)',
    'mtu': 'the fleet\'s MTU rule names the port (_fleet.MTU_CODES)',
    'pair_symptom': 'a pair\'s symptom of the pairwise benchmark, judged per device where no root explains it (_linker.PAIR_SYMPTOMS)',
    'not_checked': 'the node\'s checks did not all run (report/_report_stage.py NOT_CHECKED)',
    'fallback': 'a root said only where no other root explains the symptom: it never wins over another (_linker.link_causes)',
}
Code = namedtuple('Code', 'code layers severity other explains doc remedy remedies scope gpu_memory roles')

REGISTRY: OrderedDict[str, Code] = OrderedDict()


def _mapping(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _failed_side(symptom: Finding) -> Dict[str, Any]:
    """The failure a pair's symptom names as its cause: ``evidence.failed_side`` (the judging's
    plugin_utils/bench/_bench.py failure_cause: the server's own failure where the client only saw its
    effect), else the client's ``evidence.failure``; {} where neither is a mapping."""
    evidence = _mapping(symptom.get('evidence'))
    for name in ('failed_side', 'failure'):
        if isinstance(evidence.get(name), dict):
            return _mapping(evidence[name])
    return {}


def _failure_kind(symptom: Finding) -> Any:
    return _failed_side(symptom).get('kind')


def _gpu_memory_test(symptom: Finding) -> bool:
    """A pair's test in GPU memory (bench_findings puts the memory kind in its evidence)."""
    evidence = _mapping(symptom.get('evidence'))
    return evidence.get('memory') == 'gpu'


# A root explains a symptom only when the symptom looks like what that root causes: a memlock
# limit makes ibv_reg_mr fail (mr_failed), not a peer vanish; a lost node makes its pairs fail
# through it (lost peers, refused or hung connections), not a buffer refused.
_MR_FAILED = (lambda symptom: _failure_kind(symptom) in ('mr_failed', None), 'mr_failed')
# GPU memory that could not be registered (ibv_reg_mr refused: no peer-memory client), on a pair whose host-memory
# test did not pass (a slow port at the other end, say): the GPUDirect RDMA chain of the end that failed. The third
# part, True: only a root on a node whose side failed so explains it (evidence.failed_side's hosts, where the
# symptom names them), never its peer's.
_GPU_MR_FAILED = (lambda symptom: _gpu_memory_test(symptom) and _failure_kind(symptom) == 'mr_failed',
                  'GPU memory, mr_failed on its node', True)
# GPUs of one node that did not talk peer-to-peer while no variable forbade it: P2P was impossible there.
_P2P_IMPOSSIBLE = (lambda symptom: not (symptom.get('evidence') or {}).get('variables'), 'no variable forbids P2P')
_NOT_MR_FAILED = (lambda symptom: _failure_kind(symptom) != 'mr_failed', 'not mr_failed')


def _register(code: str, layers: Any, severity: str, doc: str, remedy: str, other: Optional[Dict[str, str]] = None,  # pylint: disable=too-many-arguments
              explains: Iterable[Any] = (), remedies: Optional[Dict[str, str]] = None, scope: Optional[str] = None,
              gpu_memory: bool = False, roles: Tuple[str, ...] = ()) -> str:
    layers = (layers,) if isinstance(layers, str) else tuple(layers)
    if code in REGISTRY or not set(layers) <= set(LAYERS) or severity not in SEVERITIES \
            or not set(other or {}) <= set(SEVERITIES):
        raise ValueError('bad registry entry %s' % code)
    explained = OrderedDict((item, None) if isinstance(item, str) else item for item in explains)
    if scope not in (None, 'node', 'fabric', 'run'):
        raise ValueError('bad registry entry %s: scope %r' % (code, scope))
    if not set(roles) <= set(ROLES):
        raise ValueError('bad registry entry %s: roles %r' % (code, roles))
    REGISTRY[code] = Code(code, layers, severity, dict(other or {}), explained, doc, remedy, dict(remedies or {}), scope,
                          bool(gpu_memory), frozenset(roles))
    return code


def gdr_not_used(symptom: Finding) -> bool:
    """Does a symptom's own evidence say that GPUDirect RDMA was not used (a collective's
    transport from NCCL's INFO lines, ``evidence.transport.gdr`` or ``evidence.gdr`` false, or
    the path NCCL takes, ``evidence.nccl_path``)?"""
    evidence = _mapping(symptom.get('evidence'))
    transport = _mapping(evidence.get('transport'))
    return evidence.get('gdr') is False or transport.get('gdr') is False or evidence.get('nccl_path') in ('host_memory', 'socket')


# A peer-memory root explains a slow collective where the run says GPUDirect RDMA was not used.
_GPU_MEMORY_SYMPTOMS = ('BENCH_GPU_MEMORY_LOW', 'BENCH_GPU_MEMORY_FAILED', 'COLLECTIVE_CULPRIT',
                        ('COLLECTIVE_BUSBW_LOW', (gdr_not_used, 'GPUDirect RDMA not used')))
# The peer-memory chain's roots: ibv_reg_mr of GPU memory fails without a peer-memory client, whatever the host memory did.
_PEER_MEMORY_SYMPTOMS = _GPU_MEMORY_SYMPTOMS + (('BENCH_PAIR_FAILED', _GPU_MR_FAILED),)
_NO_OFED = ('install MLNX OFED (its ib_core carries the peer-memory client API the inbox stack lacks), or use the dma-buf '
            'path (kernel >= 5.12 and a dma-buf capable GPU driver, NCCL_DMABUF_ENABLE)')

# ---------------------------------------------------------------------------- IB layer
IB_PORT_DOWN = _register(
    'IB_PORT_DOWN', 'ib', 'error', 'port not ACTIVE (Polling: no link partner)',
    'check the cable and the switch port (iblinkinfo, ibstat %(device)s); a disabled port: ibportstate enable',
    other={'info': 'a port of a storage or management card (not a compute rail by its model, GPU affinity or NCCL_IB_HCA): '
                   'an uncabled second port of such a card is common and carries no collective'},
    explains=('BENCH_PAIR_FAILED', 'BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT', 'BENCH_NODE_NOT_TESTED'),
    roles=('port', 'port_owned'))
IB_RATE_DEGRADED = _register(
    'IB_RATE_DEGRADED', 'ib', 'error', 'width 1X or rate below the node\'s other ports',
    'reseat or replace the cable/transceiver, then check with iblinkinfo that it trains at full width',
    # FABRIC_LINK_DEGRADED of the same host link (the switch's view of this port): one fault, one root.
    # Not BENCH_GPU_MEMORY_LOW: a slow port slows host and GPU memory of the same pair alike, and that
    # symptom is GPU memory slower than host memory.
    explains=('BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT', 'FABRIC_LINK_DEGRADED'),
    roles=('port', 'port_owned'))
IB_ERROR_COUNTERS = _register(
    'IB_ERROR_COUNTERS', 'ib', 'warning', 'symbol/receive/link errors counted (saturated counters said)',
    'clear the counters (perfquery -x -R) and watch whether they rise under load; rising symbol or receive errors mean '
    'a bad cable or transceiver',
    roles=('port',))
MTU_MISMATCH = _register(
    'MTU_MISMATCH', 'ib', 'warning', 'active MTU unlike most ports of the fleet',
    'set the same MTU on every port of the fabric (subnet manager partition MTU, netdev MTU for RoCE)',
    roles=('mtu',))
ROCE_NO_V2_GID = _register(
    'ROCE_NO_V2_GID', 'ib', 'error', 'RoCE port without a RoCE v2 GID with an IPv4 address',
    'give the port\'s netdev an IP address; check cma_roce_mode',
    other={'info': 'a storage or management port: not a compute rail by its model, GPU affinity or NCCL_IB_HCA'},
    roles=('port',))
IB_ERRORS_UNDER_LOAD = _register(
    'IB_ERRORS_UNDER_LOAD', 'ib', 'error', 'counters rose during a pair\'s test',
    'replace the cable or transceiver of %(hca)s on %(host)s',
    explains=('BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT'))

# ---------------------------------------------------------------------------- RoCE lossless (plugin_utils/diagnosis/_roce_rules.py)
# One finding per node and code, the ports in the subject; docs/roce.md explains each check.


def _qos_parts_missing_only(symptom: Finding) -> bool:
    """FLEET_DIFFERS roce_qos whose value is the peers' with parts left out: the parts a ROCE_*
    finding of the node names (_roce_rules.qos_signature leaves them out), nothing set otherwise."""
    evidence = _mapping(symptom.get('evidence'))

    def parts(port: Any) -> Optional[Set[Tuple[str, str]]]:
        # One port's [name, value] parts as qos_signature gives them (compared as parts, never parsed
        # back from text: 'pfc 3,4' is one part); anything else: None (fail closed).
        if not isinstance(port, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in port):
            return None
        return set((str(name), str(value)) for name, value in port)
    value = [parts(v) for v in evidence.get('value') or []]
    ref = [parts(r) for r in evidence.get('most_nodes') or []]
    if symptom.get('subject') != 'roce_qos' or not value or None in value + ref:
        return False
    refs = [r for r in ref if r is not None]
    return all(any(v <= r for r in refs) for v in value if v is not None)


# A node's lossless settings unlike its peers' only where a ROCE_* fault of the node is (the fleet
# comparison, plugin_utils/diagnosis/_fleet.py roce_qos, names the same ports): one fault, one root. A part
# set otherwise (PFC on priority 4 where the peers use 3) is a difference of its own.
_ROCE_QOS_DIFFERS = ('FLEET_DIFFERS', (_qos_parts_missing_only, 'roce_qos, only the parts the ROCE finding names'))
# Not COLLECTIVE_NODE_SLOW: a node's own collective runs over its GPUs' interconnect (its path is the
# node and its GPUs, rules/_collective.py local_collective_findings), not through the RoCE ports.
_ROCE_SYMPTOMS = ('BENCH_PAIR_LOW', 'BENCH_PAIR_FAILED', 'COLLECTIVE_CULPRIT', _ROCE_QOS_DIFFERS)
_ROCE_ROLE = 'run playbooks/configure.yml -e gpu_fabric_roce_qos=true --tags roce_qos (role roce_qos), and match the switch ports'
ROCE_QOS_UNKNOWN = _register(
    'ROCE_QOS_UNKNOWN', 'ib', 'warning',
    'RoCE port whose DCB settings (trust, PFC) could not be read: neither mlnx_qos nor dcb answered (fail closed)',
    'install mlnx-tools (mlnx_qos) or iproute2 with dcb on the node, or run roce_qos_facts with qos_tools=always',
    other={'info': 'storage or management ports (not compute rails by their model, GPU affinity or NCCL_IB_HCA), which carry no compute traffic'})
ROCE_TRUST_PCP = _register(
    'ROCE_TRUST_PCP', 'ib', 'error',
    'RoCE port trusts PCP (VLAN priority) while RoCE v2 marks DSCP: untagged RDMA traffic lands on priority 0',
    'set trust dscp (mlnx_qos -i IF --trust dscp): ' + _ROCE_ROLE,
    other={'warning': 'RDMA CM ToS carries no DSCP either'}, explains=_ROCE_SYMPTOMS)
ROCE_PFC_OFF = _register(
    'ROCE_PFC_OFF', 'ib', 'error', 'PFC enabled on no priority of a RoCE port: RDMA traffic is not lossless',
    'enable PFC on the RDMA priority (mlnx_qos -i IF --pfc 0,0,0,1,0,0,0,0): ' + _ROCE_ROLE, explains=_ROCE_SYMPTOMS)
ROCE_TC_NOT_LOSSLESS = _register(
    'ROCE_TC_NOT_LOSSLESS', 'ib', 'error',
    'the RDMA CM ToS (NCCL_IB_TC) maps through the DSCP map to a priority without PFC: RDMA lands in a lossy queue',
    'set the RDMA CM ToS to the lossless class (106: DSCP 26, ECT) and map DSCP 26 to the PFC priority: ' + _ROCE_ROLE,
    explains=_ROCE_SYMPTOMS)
ROCE_DSCP_CONFLICT = _register(
    'ROCE_DSCP_CONFLICT', 'ib', 'error',
    'a DSCP mapped to two or more priorities (dcb app allows conflicting entries): which one the NIC applies is not known',
    'keep one priority per DSCP (dcb app replace dev IF dscp-prio 26:3 removes the DSCP\'s other entries, dcb-app(8)): ' + _ROCE_ROLE,
    other={'warning': 'a DSCP that neither the RDMA CM ToS nor the CNPs use'}, explains=_ROCE_SYMPTOMS)
ROCE_ECN_OFF = _register(
    'ROCE_ECN_OFF', 'ib', 'error',
    'ECN (DCQCN) off for the RDMA priority at the notification (roce_np) or reaction (roce_rp) point',
    'enable ECN on the RDMA priority (echo 1 > /sys/class/net/IF/ecn/roce_np/enable/3 and roce_rp/enable/3): ' + _ROCE_ROLE,
    explains=_ROCE_SYMPTOMS)
ROCE_CNP_LOSSY = _register(
    'ROCE_CNP_LOSSY', 'ib', 'warning',
    'CNPs are sent on a priority that is neither PFC-enabled nor on a strict-priority TC: congestion feedback can be dropped',
    'send CNPs on priority 6 with DSCP 48 (ecn/roce_np/cnp_802p_prio, cnp_dscp) and give that TC strict priority: ' + _ROCE_ROLE,
    explains=(_ROCE_QOS_DIFFERS,))
ROCE_MTU_MISMATCH = _register(
    'ROCE_MTU_MISMATCH', 'ib', 'warning',
    'the netdev MTU of a RoCE port leaves an RDMA MTU below 4096 (the netdev must carry 4096 + the RoCE headers)',
    'set the netdev MTU of the RoCE port to 9000 (or at least 4200) on the node and the switch port',
    explains=('BENCH_PAIR_LOW',))
ROCE_CONGESTION = _register(
    'ROCE_CONGESTION', 'ib', 'warning',
    'RoCE loss counters (out_of_sequence, packet_seq_err, local_ack_timeout_err) counted: packets were dropped and retransmitted',
    'check PFC on the switch ports of %(subject)s (pause counters: ethtool -S IF | grep prio3_pause) and the lossless '
    'findings; clear the counters and watch whether they rise under load',
    other={'info': 'totals since boot, and no benchmark window said whether they rose under load'}, explains=('BENCH_PAIR_LOW',))

# ---------------------------------------------------------------------------- fleet (plugin_utils/diagnosis/_fleet.py)
# The remedy is the compared attribute's (_fleet.ATTRIBUTES).
FLEET_HW_MISSING = _register(
    'FLEET_HW_MISSING', ('ib', 'ib_gpu'), 'error',
    'fewer RDMA devices, GPUs or ports than a strict majority of the nodes of its kind (same GPU model; no GPU: same HCA '
    'models); subject `hca_count`, `gpu_count` or `rails`', '%(attribute_remedy)s',
    # The tests of the missing rail find no device, a GPU without its own NIC reaches a farther one,
    # NCCL runs on fewer rails.
    explains=('BENCH_PAIR_FAILED', 'BENCH_PAIR_LOW', 'BENCH_GPU_MEMORY_FAILED', 'BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'))
FLEET_RAIL_SLOWER = _register(
    'FLEET_RAIL_SLOWER', 'ib', 'error',
    'ports slower than the majority\'s of the kind, or on another link layer (a port `IB_PORT_DOWN` or `IB_RATE_DEGRADED` '
    'reports is left to them)', '%(attribute_remedy)s',
    # A slower port slows host and GPU memory alike: it cannot make GPU memory slower than host memory.
    explains=('BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT'))
FLEET_DIFFERS = _register(
    'FLEET_DIFFERS', ('ib', 'ib_gpu', 'host'), 'warning',
    'unlike the majority of the kind in the subject: `firmware`, `board_id`, `hca_model`, `roce_mtu` (netdev MTU the RDMA '
    'MTU does not show), `gid_index`, `roce_qos` (RoCE lossless settings), `peer_memory`, `kernel`, `ofed`, `nccl` '
    '(recommended settings), `other_hcas` (storage and management cards), or more GPUs/HCAs/faster ports; evidence `value`, '
    '`most_nodes`', '%(attribute_remedy)s',
    other={'info': '`other_hcas`: a storage or management card more than the peers have'})
FLEET_SPLIT = _register(
    'FLEET_SPLIT', ('ib', 'ib_gpu', 'host'), 'warning',
    'nodes of a kind differ and no strict majority (two nodes, or a tie) says which is right: `evidence.values` lists each '
    'value with its hosts, no node is blamed', 'find out which is intended and align the others: %(attribute_remedy)s')

# ---------------------------------------------------------------------------- IB + GPU layer
# The four peer-memory roots: which one a node gets is _gdr.peer_verdict's decision.
GDR_MM_KOBJ_NOT_EXPORTED = _register(
    'GDR_MM_KOBJ_NOT_EXPORTED', 'ib_gpu', 'error',
    'kernel without the `mm_kobj` export (removed upstream, and in RHEL 9.6) → OFED without `HAVE_MM_KOBJ_EXPORTED` → no memory_peers client',
    'a kernel that exports mm_kobj, then rebuild MLNX OFED against it (role ofed_peermem, tag ofed_peermem)',
    other={'warning': 'where dma-buf can stand in'}, explains=_PEER_MEMORY_SYMPTOMS, gpu_memory=True,
    roles=('gpudirect',))
GDR_OFED_STALE_BUILD = _register(
    'GDR_OFED_STALE_BUILD', 'ib_gpu', 'error', 'the kernel exports `mm_kobj`, OFED was built without it: rebuild',
    'rebuild MLNX OFED for the running kernel (role ofed_peermem, tag ofed_peermem)',
    other={'warning': 'where dma-buf can stand in'}, explains=_PEER_MEMORY_SYMPTOMS, gpu_memory=True,
    roles=('gpudirect',))
GDR_PEERMEM_NOT_LOADED = _register(
    'GDR_PEERMEM_NOT_LOADED', 'ib_gpu', 'error', 'peer-memory module not loaded',
    'load the peer-memory module now and at boot (role rdma_modules, tag rdma_modules)',
    other={'warning': 'where dma-buf can stand in'}, explains=_PEER_MEMORY_SYMPTOMS, remedies={'no_ofed': _NO_OFED}, gpu_memory=True,
    roles=('gpudirect',))
GDR_MEMORY_PEERS_MISSING = _register(
    'GDR_MEMORY_PEERS_MISSING', 'ib_gpu', 'error', 'module loaded, no memory_peers client',
    'check the kernel log of the peer-memory module; reload it (role ofed_peermem)',
    other={'warning': 'where dma-buf can stand in'}, explains=_PEER_MEMORY_SYMPTOMS, remedies={'no_ofed': _NO_OFED}, gpu_memory=True,
    roles=('gpudirect',))
# What blocks a peer-memory path as a node says it (_gdr.peer_verdict's ``blocker``, deepest root
# first as _gdr.PEER_OUTCOMES) -> the root's code. The controller names the finding: this module
# is imported by no module, so the registry never travels to a node.
PEER_BLOCKER_CODES = OrderedDict((
    ('mm_kobj_not_exported', GDR_MM_KOBJ_NOT_EXPORTED),
    ('ofed_stale_build', GDR_OFED_STALE_BUILD),
    ('peermem_not_loaded', GDR_PEERMEM_NOT_LOADED),
    ('memory_peers_missing', GDR_MEMORY_PEERS_MISSING),
))
GDR_ACS_REDIRECT = _register(
    'GDR_ACS_REDIRECT', 'ib_gpu', 'error', 'ACS redirects P2P on a GPU↔NIC path',
    'disable ACS on the GPU<->NIC paths (role pcie_acs, tag pcie_acs)',
    explains=('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT', 'COLLECTIVE_NODE_SLOW',
              ('COLLECTIVE_GPUS_NOT_P2P', _P2P_IMPOSSIBLE)), gpu_memory=True,
    roles=('gpudirect',))
GPU_NIC_FAR = _register(
    'GPU_NIC_FAR', 'ib_gpu', 'warning', 'a GPU\'s nearest NIC is PHB/NODE/SYS, or a compute NIC has no GPU near',
    'put GPU and NIC under one PCIe switch, or bind the job to the NIC of the same NUMA node',
    explains=('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'),
    remedies={'nic_slot': 'move the NIC to the slot of its GPU\'s PCIe switch (or check NCCL_IB_HCA / the rail map)'}, gpu_memory=True,
    roles=('gpudirect',))
# A PCIe link on the way of an HCA or a GPU trained below what both of its ends can do
# (plugin_utils/diagnosis/_pcie_rules.py; facts gdr.pcie_links, module_utils/_pcie.py): every byte through it
# crawls, host memory and GPU memory alike for an HCA's link, GPU memory for a GPU's.
PCIE_LINK_DEGRADED = _register(
    'PCIE_LINK_DEGRADED', 'ib_gpu', 'error',
    'a PCIe link of an HCA, a GPU or a bridge above them trained narrower or slower than both of its ends can do '
    '(a GPU\'s own link below its speed is its idle power saving, not judged); evidence: both ends, the speeds, widths '
    'and the bandwidth it caps against the HCA ports\' rate',
    'reseat the card (or its riser/cable) at %(device)s and check the slot\'s lane setting in the BIOS (bifurcation); '
    'then check that current_link_width/current_link_speed under /sys/bus/pci/devices/%(bdf)s match the maximum',
    other={'warning': 'the link still carries more than the rate of every HCA port whose traffic crosses it'},
    # Not COLLECTIVE_NODE_SLOW: a node's own collective's path is its GPUs' interconnect, no HCA or GPU<->NIC link.
    explains=('BENCH_PAIR_LOW', 'BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'))
# No RDMA device, or nothing at all: the node cannot join the mesh; alone, nothing can run.
GDR_NO_RDMA_NIC = _register(
    'GDR_NO_RDMA_NIC', 'ib_gpu', 'error',
    'GPUs but no RDMA device: NCCL would use its socket transport between nodes (`evidence.nccl_path`: `socket`)',
    'check that the HCA is on the PCI bus (lspci) and that its drivers are loaded (mlx5_core, mlx5_ib, ib_uverbs: role '
    'rdma_modules); in a VM or container, pass the RDMA devices through',
    explains=('BENCH_NODE_NOT_TESTED', 'BENCH_NOT_RUN', 'COLLECTIVE_SOCKET_TRANSPORT', 'COLLECTIVE_CULPRIT'), gpu_memory=True,
    roles=('gpudirect', 'no_rdma'))
GDR_NOT_READY = _register(
    'GDR_NOT_READY', 'ib_gpu', 'error',
    '`gdr_ready` false for a reason no other rule names (the reasons, and the path NCCL takes, in evidence)',
    'see the reasons; gdr_facts lists them with the facts behind each', gpu_memory=True,
    roles=('gpudirect',))

# ---------------------------------------------------------------------------- host layer
HOST_CPU_GOVERNOR = _register(
    'HOST_CPU_GOVERNOR', 'host', 'warning', 'CPUs not on the performance governor',
    'run playbooks/configure.yml --tags cpu_governor (role cpu_governor: performance now and at every boot)')
# ibv_reg_mr fails beyond the limit: the pair's test does not start, NCCL on that node fails.
# Not HOST_CPU_GOVERNOR: the governor does not cap RDMA bandwidth (a ConnectX-4 pair's ib_send_bw
# plateau was the same under powersave as after cpupower frequency-set -g performance:
# https://chrispaquin.com/2026/03/22/project-nvidia-hpc-infiniband-homelab-gpu-cluster-part-3-rdma-performance-testing/).
HOST_MEMLOCK_LIMITED = _register(
    'HOST_MEMLOCK_LIMITED', 'host', 'error', 'locked-memory limit below what RDMA registration needs',
    'run playbooks/configure.yml --tags memlock (role memlock: unlimited for logins and services)',
    other={'warning': 'enough for the benchmark, or root exempt by CAP_IPC_LOCK'},
    explains=(('BENCH_PAIR_FAILED', _MR_FAILED), ('BENCH_GPU_MEMORY_FAILED', _MR_FAILED), 'COLLECTIVE_CULPRIT'))
HOST_MODULES_NOT_PERSISTENT = _register(
    'HOST_MODULES_NOT_PERSISTENT', 'host', 'warning', 'an RDMA or peer-memory module loaded now but listed in no modules-load.d',
    'run playbooks/configure.yml --tags rdma_modules (role rdma_modules writes /etc/modules-load.d/gpu-fabric.conf)')
# GPUDirect RDMA needs the same physical addresses on every device: an IOMMU that translates the
# DMA of the GPUs or HCAs breaks or slows it (https://docs.nvidia.com/cuda/gpudirect-rdma/, IOMMUs).
HOST_IOMMU_TRANSLATED = _register(
    'HOST_IOMMU_TRANSLATED', 'host', 'warning',
    'the IOMMU translates the DMA of GPUs or HCAs (iommu_groups type DMA or DMA-FQ, not identity): GPUDirect RDMA and '
    'PCIe peer-to-peer need passthrough',
    'boot with iommu=pt (with intel_iommu=on or amd_iommu=on where the IOMMU is wanted for VMs), or disable the '
    'IOMMU (VT-d / AMD-Vi) in the BIOS',
    explains=('BENCH_GPU_MEMORY_LOW', 'BENCH_GPU_MEMORY_FAILED', 'COLLECTIVE_CULPRIT', 'COLLECTIVE_NODE_SLOW',
              ('COLLECTIVE_GPUS_NOT_P2P', _P2P_IMPOSSIBLE)), gpu_memory=True)
HOST_UNREACHABLE = _register(
    'HOST_UNREACHABLE', 'host', 'error', 'no facts came back (evidence.msg: the connection\'s error, where the run kept it); '
    'nothing on the node was checked',
    'check that the node is up and reachable over SSH; nothing on it was checked',
    roles=('not_checked',))
# A node gone mid-run: its pairs fail as node_lost/peer_lost, the collective over it fails.
HOST_LOST = _register(
    'HOST_LOST', 'host', 'error', 'answered at the start, did not get through a later stage (unreachable or a task failed)',
    'see the run\'s output for %(host)s (unreachable or failed task), bring it back, run again',
    explains=(('BENCH_PAIR_FAILED', _NOT_MR_FAILED), 'BENCH_GPU_MEMORY_FAILED', 'COLLECTIVE_FAILED', 'COLLECTIVE_CULPRIT',
              'COLLECTIVE_SUSPECT'),
    roles=('not_checked',))
HOST_TASK_FAILED = _register(
    'HOST_TASK_FAILED', 'host', 'error',
    'a task failed on the node and was rescued (stage, task, message in evidence): what that stage checks there is missing',
    'fix what the message names and run again; what this stage checks on %(host)s is missing',
    explains=(('BENCH_PAIR_FAILED', _NOT_MR_FAILED), 'BENCH_GPU_MEMORY_FAILED', 'COLLECTIVE_FAILED', 'COLLECTIVE_CULPRIT',
              'COLLECTIVE_SUSPECT', 'BENCH_NODE_NOT_TESTED'),
    roles=('not_checked',))
HOST_NOTHING_TO_CHECK = _register(
    'HOST_NOTHING_TO_CHECK', 'host', 'error', 'neither GPUs nor RDMA devices found: nothing of the fabric was checked (fail closed)',
    'check lspci for the GPUs and HCAs and that their drivers are loaded; run against the node itself (not a container '
    'without /sys); leave non-GPU hosts out of the inventory group',
    explains=('BENCH_NODE_NOT_TESTED', 'BENCH_NOT_RUN', 'COLLECTIVE_NOT_RUN'),
    roles=('gpudirect', 'no_rdma'))
RUN_NOTHING_VALIDATED = _register(
    'RUN_NOTHING_VALIDATED', 'host', 'error', 'no node returned facts (the pattern matched no host, or every node failed)',
    'check the inventory and gpu_fabric_hosts (a group or host pattern); a host named localhost is a node too '
    '(-i localhost, -c local validates this machine)',
    explains=('BENCH_NOT_RUN', 'COLLECTIVE_NOT_RUN'))

# ---------------------------------------------------------------------------- measured
_LOWER = 'see the lower-layer findings of both nodes'
BENCH_PAIR_FAILED = _register(
    'BENCH_PAIR_FAILED', 'benchmark', 'error', 'a pair\'s test failed (kind and the server side\'s cause in evidence)', _LOWER,
    roles=('pair_symptom',))
BENCH_PAIR_LOW = _register(
    'BENCH_PAIR_LOW', 'benchmark', 'error',
    'below `fabric_bench_bw_ratio` of the rail\'s nominal rate (the fleet\'s most common port rate of the rail)', _LOWER,
    roles=('pair_symptom',))
BENCH_GPU_MEMORY_FAILED = _register(
    'BENCH_GPU_MEMORY_FAILED', 'benchmark', 'error', 'GPU memory failed where host memory passed on the same pair and rail', _LOWER,
    roles=('pair_symptom',))
BENCH_GPU_MEMORY_LOW = _register(
    'BENCH_GPU_MEMORY_LOW', 'benchmark', 'error', 'GPU memory below `fabric_bench_gpu_ratio` of host memory on the same pair',
    _LOWER, other={'info': 'over an HCA with no GPU near'},
    remedies={'no_gpu_near': 'leave this HCA out of GPU-memory tests (fabric_bench_hcas), or pin jobs to NICs near their GPUs'},
    roles=('pair_symptom',))
BENCH_NODE_NOT_TESTED = _register(
    'BENCH_NODE_NOT_TESTED', 'benchmark', 'error', 'a node left out of the mesh (no HCA, perftest not found), with the reason',
    'fix the reason and run the benchmark again; none of its links was tested')
BENCH_NOT_RUN = _register(
    'BENCH_NOT_RUN', 'benchmark', 'error',
    'fewer than two nodes could run the mesh: nothing was tested, `evidence.skipped` says why',
    'see the nodes\' findings; the mesh needs two or more nodes with an ACTIVE RDMA port and perftest (%(test)s) installed')
# Pair tests that never reached the hardware (plugin_utils/bench/_bench.py not_reached): the benchmark could not set
# them up, so they say nothing of any device and no device verdict follows from them; the run is what failed.
BENCH_RUN_BROKEN = _register(
    'BENCH_RUN_BROKEN', 'benchmark', 'error',
    'pair tests that never reached the hardware: the benchmark could not set them up (its beacon port or perftest\'s TCP '
    'port in use, perftest missing, arguments refused) or stopped them (its controller gone); `evidence.causes` names each '
    'node\'s cause, no device verdict follows from these tests',
    'free what the causes name (another benchmark run, a leftover perftest server: ss -ltnp on the node) or give the '
    'benchmark free ports (fabric_bench_beacon_port, fabric_bench_base_port), install perftest where it is missing, and '
    'run the benchmark again: these pairs were not tested', scope='run')
# Records of a node's benchmark that could not be placed in a pair (plugin_utils/bench/_bench.py record_problem): dropped
# so that the other pairs are judged, but the tests they held were not judged at all, so the run fails closed.
BENCH_RECORDS_MALFORMED = _register(
    'BENCH_RECORDS_MALFORMED', 'benchmark', 'error',
    'records of a node\'s benchmark that could not be judged (a field missing or of the wrong type: `evidence.records` '
    'names each); they were dropped and the tests they held were not judged',
    'the node\'s records file was changed or damaged after the run (bench-records/<node>.records.json.gz, or an '
    'imported records file): run the benchmark again; the tests it held were not judged', scope='run')
# Symptoms that no finding on their path explains, on the one device all their tests share
# (_diagnose.unexplained_findings): a fault no rule names, said once on its device.
BENCH_DEVICE_UNEXPLAINED = _register(
    'BENCH_DEVICE_UNEXPLAINED', 'benchmark', 'error',
    'every test through one device (an HCA port, a GPU<->NIC path, a node) with two or more peers is slow or failed, '
    'and no finding on the tests\' path explains it (`at` names the device, evidence the tests)',
    'nothing in the facts of %(host)s explains it: check the PCIe link of %(device)s (lspci -vv: LnkSta against LnkCap; '
    'where it trained at full speed and width, its AER counters under load: /sys/bus/pci/devices/BDF/aer_dev_correctable '
    'before and after a test), its cable or transceiver and the switch port (iblinkinfo, perfquery -x under load)',
    explains=('BENCH_PAIR_LOW', 'BENCH_PAIR_FAILED', 'BENCH_GPU_MEMORY_LOW', 'BENCH_GPU_MEMORY_FAILED', 'FABRIC_SLOW_PAIR_PATH',
              'COLLECTIVE_CULPRIT'),
    remedies={'gpu_nic': 'nothing in the facts of %(host)s explains it: check the PCIe path between %(device)s (lspci -vv: '
                         'LnkSta against LnkCap of the GPU, the NIC and the switch between them; ACS, '
                         'IOMMU)',
              'node': 'nothing in the facts of %(host)s explains it: compare the node with a healthy peer (PCIe links: '
                      'lspci -vv LnkSta, BIOS settings, firmware, its cables and switch ports)',
              # The tests' windows were read (plugin_utils/bench/_window.py): the PCIe link of the HCA sampled under load
              # and its AER counters, with the bridges above it, did not rise - the link is not the suspect.
              'hca_windowed': 'nothing in the facts of %(host)s nor in the counters read during the tests (the PCIe link of '
                              '%(device)s sampled under load, its AER counters and its bridges\', the pause and congestion '
                              'counters) explains it: check its cable or transceiver and the switch port (iblinkinfo, '
                              'perfquery -x under load), then the card itself (firmware, temperature: mlxlink, mget_temp)'})

_CULPRITS = 'see the culprit nodes and their lower-layer findings'
_RUN_OUTPUT = 'see the run\'s output and the node\'s lower-layer findings'
_INSTALL = 'install the benchmark (nccl-tests, rccl-tests) or give fabric_collective_binary'
COLLECTIVE_BUSBW_LOW = _register(
    'COLLECTIVE_BUSBW_LOW', 'collective', 'error', 'fleet busbw below the healthy share of the NICs', _CULPRITS,
    other={'warning': 'between the warn and the healthy share'},
    remedies={'node': 'see what the report compared on %(host)s: its root NODE_DIFFERS_FROM_PEERS names what differs from its '
                      'peers, or this finding says that nothing recorded differs and what was not read'})
COLLECTIVE_DATA_CORRUPTION = _register(
    'COLLECTIVE_DATA_CORRUPTION', 'collective', 'error', '`#wrong` > 0 or out of bounds', _CULPRITS,
    remedies={'node': _RUN_OUTPUT, 'missing_binary': _INSTALL})
COLLECTIVE_FAILED = _register(
    'COLLECTIVE_FAILED', 'collective', 'error',
    'the fleet run (or, launcher local, a node\'s run) did not complete, or could not start (no binary, no launcher)', _CULPRITS,
    remedies={'node': _RUN_OUTPUT, 'missing_binary': _INSTALL})
COLLECTIVE_GDR_NOT_USED = _register(
    'COLLECTIVE_GDR_NOT_USED', 'collective', 'error',
    'IB without GPUDirect RDMA although every node\'s facts say it is ready (the job\'s settings)',
    'compare the job\'s NCCL_* environment with the recommended settings (report hosts.*.nccl, role nccl_conf); check '
    'NCCL_NET_GDR_LEVEL and that containers see the peer-memory module')
COLLECTIVE_SOCKET_TRANSPORT = _register(
    'COLLECTIVE_SOCKET_TRANSPORT', 'collective', 'error',
    'NCCL used Socket on an RDMA fleet (the cause from its log: libibverbs not loaded, no device seen, NCCL_IB_DISABLE)',
    'check that the RDMA devices are visible in the job (NCCL_IB_HCA, container devices)',
    remedies={'libibverbs': 'install rdma-core\'s libibverbs (libibverbs1, or the OFED user space) where the job runs, '
                            'its container included',
              'disabled': 'remove NCCL_IB_DISABLE from the job\'s environment (fabric_collective_env, /etc/nccl.conf)'},
    explains=('COLLECTIVE_BUSBW_LOW',))
# NCCL's own log of a run: which transport two GPUs of one node used (src/transport.cc connection lines).
COLLECTIVE_GPUS_NOT_P2P = _register(
    'COLLECTIVE_GPUS_NOT_P2P', 'collective', 'error',
    'GPUs of one node talked through a network transport, or through host memory (SHM) where NVLink joins them, not '
    'peer-to-peer: the variables that forbid P2P where set (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_P2P_LEVEL), else '
    'P2P was impossible',
    'check peer-to-peer between the GPUs (nvidia-smi topo -p2p r), PCIe ACS (playbooks/configure.yml --tags pcie_acs), the '
    'IOMMU mode (iommu=pt) and that the ranks can share CUDA IPC (containers: --ipc=host)',
    remedies={'env': 'remove %(variables)s from the job\'s environment (fabric_collective_env, /etc/nccl.conf, the scheduler\'s '
                     'job environment)'},
    explains=('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_CULPRIT'))
COLLECTIVE_GDR_PATH = _register(
    'COLLECTIVE_GDR_PATH', 'collective', 'info',
    'how the collective used GPUDirect RDMA: dma-buf (NCCL says DMA-BUF is available on the GPUs) or the peer-memory client',
    'nothing to do; without a peer-memory module GPUDirect RDMA still works through dma-buf (kernel >= 5.12, NCCL_DMABUF_ENABLE)')
# NVIDIA/nccl#1676: NCCL up to 2.22.3 (src/transport/net_ib.cc ncclIbGdrSupport) accepts only the
# memory_peers client of nv_peer_mem; 2.23.4 also /sys/module/nvidia_peermem/version. A node whose
# nvidia-peermem registers no memory_peers client has GPUDirect RDMA for newer NCCL, not for older:
# 2-node all_reduce fell from ~180 to ~10 GB/s there.
COLLECTIVE_NCCL_PEERMEM_NAME = _register(
    'COLLECTIVE_NCCL_PEERMEM_NAME', 'collective', 'error',
    'the run\'s NCCL (2.22.3 or older) looks for nv_peer_mem\'s memory_peers client, the node has only nvidia-peermem: '
    'NCCL turns GPUDirect RDMA off',
    'use NCCL 2.23.4 or newer (it accepts /sys/module/nvidia_peermem/version), or a peer-memory module that registers '
    'the memory_peers client nv_mem (MLNX OFED with nv_peer_mem)',
    explains=('COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_GDR_NOT_USED', 'COLLECTIVE_CULPRIT'))
# Each node's collective run loads its own NCCL: nodes of one job that load different releases run
# different protocol and tuning code (NCCL's release notes change defaults between releases), and a
# job across them can hang or slow down; the majority's release is the fleet's, the others are named.
COLLECTIVE_NCCL_VERSION_SKEW = _register(
    'COLLECTIVE_NCCL_VERSION_SKEW', 'collective', 'warning',
    'launcher local: the NCCL library the node\'s run loaded differs from the release most nodes loaded (without such '
    'runs: the library nccl_facts found installed)',
    'install the fleet\'s NCCL release on %(host)s (the library the collective loads: LD_LIBRARY_PATH, the '
    'framework\'s bundled NCCL), then re-run the collective')
COLLECTIVE_CULPRIT = _register(
    'COLLECTIVE_CULPRIT', 'collective', 'error', 'the culprit search named this node',
    'take %(host)s out of the job and fix its lower-layer findings',
    explains=('COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_DATA_CORRUPTION'))
COLLECTIVE_NODE_SLOW = _register(
    'COLLECTIVE_NODE_SLOW', 'collective', 'error',
    'launcher local: the node\'s busbw over its own GPUs below `fabric_collective_healthy_ratio` of its peers\' median '
    '(`evidence.basis` peers), or, a lone node, of its own run in the baseline report (basis baseline)',
    'see its root: NODE_DIFFERS_FROM_PEERS names what the run recorded on %(host)s that differs from its peers (or its '
    'baseline); where this finding says nothing recorded differs, read what it says was not read (the GPUs\' state, '
    'NCCL\'s settings) and give those facts (playbooks/validate.yml) before comparing by hand')
COLLECTIVE_SUSPECT = _register(
    'COLLECTIVE_SUSPECT', 'collective', 'warning', 'the search could not clear or name this node',
    'give fabric_collective a known-good reference node')
# Culprit search by group testing (plugins/plugin_utils/bench/_group_search.py): a fault between two nodes.
COLLECTIVE_PAIR_SLOW = _register(
    'COLLECTIVE_PAIR_SLOW', 'collective', 'error',
    'the culprit search: runs with both nodes are bad, each node runs healthy without the other (a link or route between them)',
    'test the link between %(host)s and %(peer)s (playbooks/benchmark.yml --tags fabric_bench: the pair\'s perftest per rail, '
    'its switch ports and cables); the nodes alone are not at fault',
    explains=('COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_DATA_CORRUPTION'))
# Not a fault, but what could not be checked must be said (a mixed fleet, one node).
COLLECTIVE_NOT_RUN = _register(
    'COLLECTIVE_NOT_RUN', 'collective', 'info', 'the collective did not run (mixed GPU vendors, one node, check mode)',
    'run playbooks/benchmark.yml --tags fabric_collective on the nodes of one GPU vendor')

# ---------------------------------------------------------------------------- fabric beyond the node
# Rules: plugins/plugin_utils/diagnosis/_fabric.py (rates: module_utils/_rates.py). A switch port whose other end
# is a node's HCA is that node's finding, so the node's own symptoms on it are one root cause.
_FABRIC_PORT_SYMPTOMS = ('IB_ERROR_COUNTERS', 'IB_ERRORS_UNDER_LOAD', 'BENCH_PAIR_LOW', 'BENCH_PAIR_FAILED',
                         'COLLECTIVE_CULPRIT')
FABRIC_LINK_DEGRADED = _register(
    'FABRIC_LINK_DEGRADED', 'ib', 'error',
    'a switch or host link trained below what both ends can do (iblinkinfo "Could be") or below the fabric\'s usual rate '
    'for such links; subject names both ports',
    'reseat or replace the cable or transceiver of %(link)s, then check with iblinkinfo that it trains at full width and speed',
    explains=('BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT', 'FABRIC_SLOW_PAIR_PATH'))
FABRIC_UPLINKS_ASYMMETRIC = _register(
    'FABRIC_UPLINKS_ASYMMETRIC', 'ib', 'error', 'a leaf switch with fewer active up-links to the spines than its peers',
    'find the missing up-link of %(switch)s (iblinkinfo: a Down/Polling port among its spine ports) and reconnect it')
FABRIC_SM_ABSENT = _register(
    'FABRIC_SM_ABSENT', 'ib', 'error', 'no subnet manager answers as master (sminfo fails or none is MASTER)',
    'start a subnet manager (opensm on a host, or the switch\'s SM) and give it the highest priority')
FABRIC_SM_MULTIPLE_MASTERS = _register(
    'FABRIC_SM_MULTIPLE_MASTERS', 'ib', 'error', 'more than one subnet manager claims to be master',
    'stop all but one master SM, or set distinct priorities so that the others become standby',
    explains=('FABRIC_SM_DISAGREE', 'FABRIC_SM_PRIORITY_TIE'))
FABRIC_SM_PRIORITY_TIE = _register(
    'FABRIC_SM_PRIORITY_TIE', 'ib', 'warning',
    'subnet managers share a priority, a standby at the master\'s included (every SM is read: sminfo and `saquery SMIR`); '
    'the master is then chosen by GUID',
    'give the intended master the highest sm_priority and the standbys lower, distinct ones (opensm.conf sm_priority, '
    'or the switch SM\'s priority), then check with saquery SMIR')
FABRIC_SM_INACTIVE = _register(
    'FABRIC_SM_INACTIVE', 'ib', 'warning',
    'a subnet manager other than the master is NOTACTIVE or DISCOVERING: it will not take over when the master fails',
    'restart or re-enable that SM so that it comes up STANDBY (sminfo <its LID> then says SMINFO_STANDBY), or remove it '
    'from the plan of failover')
FABRIC_SM_DISAGREE = _register(
    'FABRIC_SM_DISAGREE', 'ib', 'error', 'nodes\' ports of one rail see different SM LIDs (sysfs `sm_lid`)',
    'find why the subnet is split (two masters, an unfinished handover) with sminfo on the nodes of each group')
FABRIC_LINK_FLAPPING = _register(
    'FABRIC_LINK_FLAPPING', 'ib', 'error', '`link_downed` rose at a switch port between two counter reads',
    'replace the cable or transceiver of %(port)s; a port that keeps flapping can be disabled (ibportstate disable)',
    explains=_FABRIC_PORT_SYMPTOMS)
FABRIC_ERROR_RATE = _register(
    'FABRIC_ERROR_RATE', 'ib', 'error',
    'symbol errors per second above the IBTA 1e-12 bit error ratio at the link\'s rate, or `link_error_recovery` rising, at a switch port',
    'replace the cable or transceiver of %(port)s and watch the counters (perfquery -x) under load',
    explains=_FABRIC_PORT_SYMPTOMS)
FABRIC_SLOW_PAIR_PATH = _register(
    'FABRIC_SLOW_PAIR_PATH', 'ib', 'info', 'the switch ports and cables between the two HCAs of a slow or failed pair',
    'check the cables named in the evidence, starting with those other findings name')
FABRIC_INPUT_UNREAD = _register(
    'FABRIC_INPUT_UNREAD', 'ib', 'warning',
    'lines of the fabric tools\' output (or of the saved outputs read with from_log) that no pattern read; '
    'the evidence names the first ones',
    'look at the lines named in the evidence (a paste wrapped or cut, another tool\'s output in the file, a format this '
    'version does not know) and give the tools\' plain output: iblinkinfo, ibnetdiscover or ibnetdiscover -p, sminfo, '
    'saquery SMIR, perfquery -x')
FABRIC_TOOLS_MISSING = _register(
    'FABRIC_TOOLS_MISSING', 'ib', 'warning',
    'the fabric could not be (fully) discovered: infiniband-diags missing, a tool failed or timed out, or the node has no IB port',
    'install infiniband-diags on the node that discovers the fabric and give it access to umad (root)')
# ---------------------------------------------------------------------------- end of fabric block
# ---- the subnet's ports (ibqueryerrors) and the bring-up grace
IB_SUBNET_ERRORS = _register(
    'IB_SUBNET_ERRORS', 'ib', 'error',
    'a port of the subnet (ibqueryerrors read twice over every switch and CA) whose error counters rose over the window: '
    'symbol errors past the 1e-12 BER or link_error_recovery rising (subject: the port and its link), wherever it sits, on a '
    'tested route or not; a retrain is FABRIC_LINK_FLAPPING, and without ibqueryerrors the switch sweep\'s FABRIC_ERROR_RATE '
    'stands for it',
    'replace the cable or transceiver of %(port)s and watch its counters (ibqueryerrors, perfquery -x) under load',
    other={'warning': 'an error counter saturated at its maximum (the rise is unknown: clear it with perfquery -R and validate again)',
           'info': 'the rise fell inside the bring-up grace window (gpu_fabric_link_grace minutes after boot) and the link did '
                   'not retrain repeatedly: explains nothing'},
    explains=_FABRIC_PORT_SYMPTOMS)

# ---- NCCL's settings and configuration files
# NCCL's settings (plugin_utils/diagnosis/rules/_nccl_settings.py): what each run's own log says NCCL used (its ENV
# lines, module_utils/_nccl.py), attributed to the file that holds it (nccl_facts, module_utils/_nccl_conf.py).
# Root on the node's GPUs (its own run's path): it explains only that node's slow run, never a peer's.
COLLECTIVE_NCCL_TUNING = _register(
    'COLLECTIVE_NCCL_TUNING', 'collective', 'error',
    'the node\'s own run was slow and NCCL used tuning variables there that its peers did not (NCCL_MAX_NCHANNELS, '
    'NCCL_PROTO, NCCL_ALGO, NCCL_BUFFSIZE, NCCL_NTHREADS, ...), each named with its value, the peers\', its source '
    '(the environment or the configuration file) and what NCCL\'s documentation says it does',
    'remove %(variables)s from %(sources)s on %(host)s (NCCL chooses them itself: its documentation lists them under '
    '"Debugging", not to be set in production), or set the same on every node, then re-run the collective',
    other={'warning': 'a variable NCCL\'s documentation discourages (NCCL_PROTO) set on a node whose run was not slow'},
    explains=('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_BUSBW_LOW'))
NCCL_CONF_DIFFERS = _register(
    'NCCL_CONF_DIFFERS', 'collective', 'warning',
    'validate time: a node\'s NCCL configuration file (/etc/nccl.conf, ~/.nccl.conf or $NCCL_CONF_FILE) sets variables '
    'other than most nodes\' (nccl_facts), each named with the file',
    'make %(file)s on %(host)s the same as on the other nodes (or remove %(variables)s from it): a job reads it '
    'without saying so, and NCCL prints its settings as "set by environment"')

# ---- the GPUs' own state (gpu_state_facts)
# The GPUs' own state (module gpu_state_facts, module_utils/_gpu_state.py; rules/_gpu.py). Each root
# sits on its GPU (('gpu', host, name), the place a GPU-memory pair test goes through) and on the
# node's GPUs (('gpus', host), the place of the node's own collective): it explains only symptoms
# whose path goes through that GPU or the node's GPUs.
_GPU_SLOW = ('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_CULPRIT', 'BENCH_GPU_MEMORY_LOW')
GPU_BUSY = _register(
    'GPU_BUSY', 'host', 'warning',
    'a compute process that is not the benchmark\'s own holds a GPU (nvidia-smi --query-compute-apps; monitoring agents '
    'such as DCGM\'s nv-hostengine and dcgm-exporter excepted): a benchmark over that GPU is contaminated, not a '
    'hardware verdict',
    'let %(process)s finish or stop it, then run the benchmark again; a monitoring agent of your own can be allowed '
    'with gpu_fabric_gpu_monitoring_agents',
    explains=_GPU_SLOW)
GPU_CLOCKS_THROTTLED = _register(
    'GPU_CLOCKS_THROTTLED', 'host', 'error',
    'a GPU\'s clocks held down by hardware slowdown, thermal slowdown (hardware or software) or the power brake '
    '(idle, application clocks and a software power cap are not faults)',
    'check the GPU\'s cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER): airflow, fans, the PSU and the '
    'board\'s power brake signal',
    other={'warning': 'software thermal slowdown only',
           'info': 'the SM clock within 10 % of its maximum (rules/_gpu.py CLOCK_HELD_RATIO): said, explains nothing'},
    explains=_GPU_SLOW)
GPU_NVLINK_DOWN = _register(
    'GPU_NVLINK_DOWN', 'host', 'error',
    'NVLinks of a GPU inactive (or at 0 GB/s) where other GPUs of its model (on the node or its peers) have them active',
    'reset the GPU (nvidia-smi -r) or reboot; a link that stays down needs the baseboard or NVSwitch checked '
    '(nvidia-smi nvlink -s, field diagnostics)',
    explains=('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_CULPRIT', 'COLLECTIVE_GPUS_NOT_P2P'))
GPU_NVLINK_ERRORS = _register(
    'GPU_NVLINK_ERRORS', 'host', 'warning',
    'NVLink replay, recovery or CRC errors counted on a GPU\'s links since the driver loaded (nvidia-smi nvlink -e)',
    'watch the counters under load (nvidia-smi nvlink -e); links that keep counting need the GPU reseated or the '
    'baseboard checked (field diagnostics)',
    explains=('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_CULPRIT'))
GPU_XID = _register(
    'GPU_XID', 'host', 'error',
    'XID events of a GPU in the kernel log, with the severity of NVIDIA\'s XID catalog: a reset or hardware XID',
    'follow NVIDIA\'s XID catalog for XID %(xid)s (docs.nvidia.com/deploy/xid-errors): reset the GPU or drain the node '
    'for field diagnostics',
    other={'warning': 'an XID the catalog asks to watch, no reset by itself',
           'info': 'an application\'s own error, such as XID 13, 31, 43 or 45: the GPU is fine'},
    explains=_GPU_SLOW + ('BENCH_GPU_MEMORY_FAILED', 'COLLECTIVE_FAILED', 'COLLECTIVE_DATA_CORRUPTION'))
GPU_MEMORY_REMAP_PENDING = _register(
    'GPU_MEMORY_REMAP_PENDING', 'host', 'warning',
    'a GPU has a row remap or a page retirement pending (applied at the next GPU reset)',
    'reset the GPU (nvidia-smi -r, with no process on it) or reboot so that the remap takes effect',
    other={'error': 'the row remapper failed, no spare row left: the GPU needs field diagnostics'},
    explains=('BENCH_GPU_MEMORY_FAILED', 'COLLECTIVE_FAILED', 'COLLECTIVE_DATA_CORRUPTION'))
GPU_STATE_NOT_READ = _register(
    'GPU_STATE_NOT_READ', 'host', 'info',
    'parts of a node\'s GPU state not read (no nvidia-smi, a call refused or timed out, the kernel log unreadable): '
    'nothing is said of them',
    'install the GPU vendor\'s tool on the node (nvidia-smi comes with the driver) and give the facts root (become) '
    'for the kernel log', scope='node')
# ---- end of the GPUs' own state

# ---- DCBX
# DCBX (plugin_utils/diagnosis/_roce_rules.py roce_dcbx, module_utils/_dcbx.py manager): who sets a RoCE
# port's PFC/ETS/APP - the host (roce_qos) or the switch through LLDP - against who is meant to.
ROCE_DCBX_MISMATCH = _register(
    'ROCE_DCBX_MISMATCH', 'ib', 'error',
    'the DCBX mode of a RoCE port is not the one meant (roce_qos_dcbx): the host set by roce_qos is willing or its NIC '
    'firmware runs DCBX, so the switch\'s next LLDP exchange can overwrite PFC/ETS/APP; or the switch is meant to manage '
    'and the host takes nothing from it',
    'where the host manages (roce_qos_dcbx: host): set the NIC to OS-controlled DCBX (mlnx_qos -i IF -d os) and stop '
    'lldpad from accepting the switch (lldptool -T -i IF -V PFC willing=no; -V ETS-CFG willing=no), or stop lldpad; '
    'where the switch manages (roce_qos_dcbx: switch): run DCBX in the firmware (mlnx_qos -i IF -d fw) or a willing lldpad, '
    'and do not run roce_qos there',
    other={'info': 'the DCBX mode could not be read (mlnx_qos, dcb dcbx and lldptool gave nothing): not checked'})

# ---- the counters over each pair test's window
# Counters over each pair test's window (plugin_utils/bench/_window.py; rules: plugin_utils/diagnosis/rules/_window.py).
PCIE_ERRORS_UNDER_LOAD = _register(
    'PCIE_ERRORS_UNDER_LOAD', 'ib_gpu', 'error',
    'PCIe AER errors of an HCA, a GPU or a bridge on their path rose during the pair tests: correctable errors (replays: '
    'RxErr, BadTLP, BadDLLP, Rollover, Timeout) above the rate a link within the PCIe bit error ratio allows, or any '
    'uncorrectable error; the link may have trained at full speed and width (evidence: the device, the bridge, the counts, '
    'the tests)',
    'reseat or replace %(device)s (or its riser/cable) at %(bdf)s on %(host)s and check the slot; the counters rose under '
    'load while the link trained at full speed and width, so LnkSta against LnkCap will not show it '
    '(cat /sys/bus/pci/devices/%(bdf)s/aer_dev_correctable before and after a test does)',
    explains=('BENCH_PAIR_LOW', 'BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'))
PCIE_LINK_RETRAINING = _register(
    'PCIE_LINK_RETRAINING', 'ib_gpu', 'error',
    'the PCIe link of an HCA or a GPU changed speed or width while the pair tests ran (sampled under load): it retrained, '
    'which a sound link does not do - unlike PCIE_LINK_DEGRADED, a link that trained low and stays so',
    'reseat %(device)s (its riser or cable) at %(bdf)s on %(host)s and check the slot and its power; then watch '
    'current_link_speed/current_link_width under /sys/bus/pci/devices/%(bdf)s during a test',
    explains=('BENCH_PAIR_LOW', 'BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'))
ROCE_PFC_PAUSE_STORM = _register(
    'ROCE_PFC_PAUSE_STORM', 'ib', 'error',
    'PFC pause storm events (ethtool -S tx_pause_storm_*), or pause time on a priority above a share of the test time '
    '(rx: the switch paused this host\'s sending; tx: this host paused the switch); subject names the direction and priority',
    'find who pauses whom on %(subject)s: rx pauses come from the switch (a congested or misconfigured switch port, '
    'a slow receiver behind it), tx pauses from this host (its receive side cannot drain: PCIe, host memory, the NIC\'s '
    'buffers); check the PFC and buffer settings of the switch port and watch ethtool -S %(netdev)s | grep pause',
    explains=('BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT'))
ROCE_CC_NOT_WORKING = _register(
    'ROCE_CC_NOT_WORKING', 'ib', 'error',
    'congestion without congestion control: the receiving end sent CNPs (or saw ECN marks) during a pair test and the '
    'sending HCA handled few or none of them (rp_cnp_handled), so it never slowed down (DCQCN)',
    'enable the reaction point for the RDMA priority on %(hca)s of %(host)s (/sys/class/net/IF/ecn/roce_rp/enable/N) and '
    'check that CNPs reach it: their priority and DSCP (ecn/roce_np/cnp_802p_prio, cnp_dscp) must be forwarded by the '
    'switches, lossless or strict',
    explains=('BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT'))
ROCE_LOSSLESS_LOSS = _register(
    'ROCE_LOSSLESS_LOSS', 'ib', 'error',
    'RoCE loss counters (out_of_sequence, packet_seq_err, local_ack_timeout_err) rose during the pair tests on a port '
    'whose RDMA traffic is set lossless (PFC on its priority): packets were dropped where nothing should drop them',
    'a lossless class that drops: check that the switch ports of %(hca)s on %(host)s run PFC on the same priority and '
    'map the same DSCP, and their buffers (headroom); ethtool -S IF | grep -E "discard|pause" on the node',
    explains=('BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT'))

# ---- a slow node against its peers or its baseline
# A slow node, GPU or HCA that no root on its path explains, compared with its healthy peers (or with its own
# earlier healthy report, gpu_fabric_baseline) on every fact the run recorded that can shape its speed
# (plugin_utils/diagnosis/_profile.py; rule: rules/_differential.py, run after the causes are linked).
_SLOW_LOCAL = (lambda symptom: bool(symptom.get('host')), 'a node\'s own run')
NODE_DIFFERS_FROM_PEERS = _register(
    'NODE_DIFFERS_FROM_PEERS', 'host', 'error',
    'a slow node (its own collective, a culprit of the search, a device of the pairwise benchmark) that no other root '
    'explains differs from its healthy peers\' majority (or from its baseline) in recorded facts that shape speed: '
    '`evidence.differences` ranked by cost (NCCL settings, GPU processes, clocks, NVLink, PCIe; then driver, firmware, '
    'kernel, versions), each with `mine` and `theirs`; where nothing recorded differs, the symptom says so and names what was not read',
    'make %(host)s like its peers in what the evidence names, the costliest first (%(first)s), then run the benchmark again',
    other={'warning': 'only differences that cost little (a debug setting, a module list)'},
    explains=('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_CULPRIT', 'BENCH_DEVICE_UNEXPLAINED', ('COLLECTIVE_BUSBW_LOW', _SLOW_LOCAL)),
    roles=('fallback',))
BASELINE_NOT_USED = _register(
    'BASELINE_NOT_USED', 'collective', 'warning',
    'the baseline report (gpu_fabric_baseline) could not be used for a node: unreadable, not a report, no run or profile of '
    'the node, or the node was not healthy in it (`evidence.why`)',
    'give as gpu_fabric_baseline a report.json of a healthy run of the same node (its collective run ok, its status not error)')

# ---- the peer-memory build, RDMA functions, the expected inventory
# The peer-memory module against the loaded driver (module_utils/_peermem.py read_peer_memory_build): the deepest
# root of the GPUDirect chain where it holds - the module not loading, or loaded and not registering, is its effect.
GDR_PEERMEM_DRIVER_MISMATCH = _register(
    'GDR_PEERMEM_DRIVER_MISMATCH', 'ib_gpu', 'error',
    'the peer-memory module (loaded, or the file modprobe would load) is built for another NVIDIA driver version than '
    'the one loaded (a driver updated without a reboot or a DKMS rebuild); evidence: both versions and where each was read',
    'rebuild and reload the peer-memory module for the loaded driver (reboot after a driver update, or rebuild its DKMS '
    'package, then modprobe -r nvidia_peermem && modprobe nvidia_peermem; role rdma_modules)',
    other={'info': 'the comparison could not be made (nv_peer_mem carries its own version, or a version was not read): '
                   'what was not read is in the evidence',
           'warning': 'the module is not loaded and dma-buf can stand in'},
    explains=_PEER_MEMORY_SYMPTOMS + ('GDR_PEERMEM_NOT_LOADED', 'GDR_MEMORY_PEERS_MISSING'), gpu_memory=True,
    roles=('gpudirect',))
# A PCI function of an RDMA-capable class without an RDMA device (module_utils/_peermem.py read_rdma_unbound): the
# node has fewer RDMA devices than cards, whatever its peers have.
RDMA_DEVICE_UNBOUND = _register(
    'RDMA_DEVICE_UNBOUND', ('ib', 'ib_gpu'), 'error',
    'a PCI function of an RDMA-capable class (InfiniBand, or a Mellanox/NVIDIA Ethernet function) has no RDMA device: its '
    'driver is not bound (probe failed) or its RDMA driver is not loaded; evidence: the driver and the kernel log\'s lines '
    'naming the function',
    'read the kernel log lines of %(subject)s (dmesg | grep %(subject)s): a firmware or PCIe fault needs the card checked '
    '(mlxfwmanager, reseat); an RDMA driver not loaded: modprobe it (role rdma_modules)',
    other={'info': 'a Broadcom or Intel Ethernet function whose RDMA driver (bnxt_re, irdma) is not loaded: often run as '
                   'plain Ethernet by design'},
    explains=('GDR_NO_RDMA_NIC', 'FLEET_HW_MISSING', 'BENCH_NODE_NOT_TESTED', 'COLLECTIVE_SOCKET_TRANSPORT', 'COLLECTIVE_CULPRIT',
              'INVENTORY_EXPECTED_MISMATCH', 'INVENTORY_GPU_WITHOUT_RAIL'),
    scope='node')
# The node against itself and the user's expected inventory (plugin_utils/diagnosis/_inventory.py).
INVENTORY_EXPECTED_MISMATCH = _register(
    'INVENTORY_EXPECTED_MISMATCH', ('ib_gpu', 'ib'), 'error',
    'fewer GPUs or compute HCAs than `gpu_fabric_expected` says, or a compute port slower than its `rate_gbps`; subject '
    '`gpus`, `hcas.<role>` or the port',
    'find the missing or slow device (lspci, ibstat, nvidia-smi) or correct gpu_fabric_expected for this group',
    other={'warning': 'more devices, or a faster port, than expected (the inventory may be out of date)'},
    explains=('BENCH_PAIR_FAILED', 'BENCH_PAIR_LOW', 'BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT', 'FLEET_HW_MISSING'),
    scope='node')
INVENTORY_GPU_WITHOUT_RAIL = _register(
    'INVENTORY_GPU_WITHOUT_RAIL', 'ib_gpu', 'error',
    'a node with several compute rails has more GPUs than rails, unevenly: some GPU has no compute NIC of its own and '
    'shares another GPU\'s (found on every node alike, where the fleet comparison sees nothing)',
    'add the missing compute NIC(s), or check that every rail\'s HCA enumerated (lspci) and has its RDMA device',
    other={'warning': 'the rails are shared evenly but more GPUs share one than `gpu_fabric_expected` allows',
           'info': 'every compute rail serves the same number of GPUs, a documented design (DGX-1: 8 GPUs, 4 EDR NICs, '
                   'a pair of GPUs per NIC), or gpu_fabric_expected says so'},
    explains=('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'), gpu_memory=True)

# Where a finding sits when its rule names no place (Code.scope): causes that hold for a whole
# node (the peer-memory chain, the kernel, memlock, the governor, a node lost or failed), the
# subnet manager's state, the run as a whole. One decision per code, so that no rule forgets it.
SCOPES = {
    'node': (HOST_CPU_GOVERNOR, HOST_MEMLOCK_LIMITED, HOST_MODULES_NOT_PERSISTENT, HOST_UNREACHABLE, HOST_LOST, HOST_TASK_FAILED,
             HOST_NOTHING_TO_CHECK, GDR_MM_KOBJ_NOT_EXPORTED, GDR_OFED_STALE_BUILD, GDR_PEERMEM_NOT_LOADED,
             GDR_MEMORY_PEERS_MISSING, GDR_NO_RDMA_NIC, GDR_NOT_READY, COLLECTIVE_CULPRIT, COLLECTIVE_SUSPECT),
    'fabric': (FABRIC_SM_ABSENT, FABRIC_SM_MULTIPLE_MASTERS, FABRIC_SM_PRIORITY_TIE, FABRIC_SM_DISAGREE),
    'run': (RUN_NOTHING_VALIDATED,),
}
for _scope, _codes in SCOPES.items():
    for _code in _codes:
        REGISTRY[_code] = REGISTRY[_code]._replace(scope=REGISTRY[_code].scope or _scope)


def codes_with(role: str) -> Tuple[str, ...]:
    """The codes of a role (ROLES), in registry order."""
    if role not in ROLES:
        raise ValueError('no such role of a finding code: %r' % (role,))
    return tuple(code for code, entry in REGISTRY.items() if role in entry.roles)


# Which codes a root explains (a symptom anywhere above it, on the symptom's path: on_path).
EXPLAINS = OrderedDict((code, tuple(entry.explains)) for code, entry in REGISTRY.items() if entry.explains)
SYMPTOMS = frozenset(code for entry in REGISTRY.values() for code in entry.explains)


def explains(root: str, symptom: Finding, host: Optional[str] = None) -> bool:
    """Does a finding of code ``root`` explain the finding ``symptom`` (when one of the root's
    places is on the symptom's path: on_path)? ``host``: the root finding's host, where the
    caller has it: a condition that names the failing end (a third part True) then holds only for
    a root on a node whose side of the pair failed so (``evidence.failed_side``'s ``hosts``)."""
    entry = REGISTRY.get(root)
    if entry is None or symptom['code'] not in entry.explains:
        return False
    condition = entry.explains[symptom['code']]
    if condition is None:
        return True
    if not condition[0](symptom):
        return False
    side = _failed_side(symptom)
    failed_on: List[Any] = side['hosts'] if isinstance(side.get('hosts'), list) and side.get('hosts') else [side.get('host')]
    return not (len(condition) > 2 and condition[2] and host is not None and None not in failed_on and host not in failed_on)


def finding(code: str, host: Optional[str], subject: Optional[str], evidence: Any, cause: str,  # pylint: disable=too-many-arguments
            severity: Optional[str] = None, layer: Optional[str] = None, remedy: Optional[str] = None,
            at: Optional[Iterable[Place]] = None, path: Optional[Iterable[Place]] = None, **values: Any) -> Finding:
    """A finding of a registered code. ``severity``/``layer``: where the rule picks one of the
    code's other registered ones; ``remedy``: a registered variant's name; ``values`` fill the
    remedy's template (with ``host`` and ``subject``).

    ``at``: the places a root sits on, ``path``: the places a symptom's tests went through; each a
    list of places, a place a tuple: ('node', host), ('hca', host, hca), ('gpu', host, gpu),
    ('gpu_nic', host, gpu, hca), ('hca_host', host, hca) (an HCA's way to host memory: the PCIe
    bridges above it, on host-memory tests' paths only), ('services', host) (the node's services:
    on no benchmark path), ('peer_memory', host) (a peer-memory path that dma-buf stands in for:
    on no path), ('gpus', host) (the GPUs' own interconnect), ('link', end, end)
    (a fabric link, its two 'guid/port' ends sorted), ('fabric',) (the subnet). A root explains a
    symptom only where one of its places is on the symptom's path (on_path). Where the rule gives
    none, the code's scope does (SCOPES); a code that explains others and has neither is refused:
    a root without places would explain nothing."""
    entry = REGISTRY.get(code)
    if entry is None:
        raise ValueError('finding code %r is not registered in plugins/plugin_utils/diagnosis/_findings.py' % (code,))
    severity = severity or entry.severity
    if severity != entry.severity and severity not in entry.other:
        raise ValueError('%s: severity %r is not registered' % (code, severity))
    layer = layer or entry.layers[0]
    if layer not in entry.layers:
        raise ValueError('%s: layer %r is not registered' % (code, layer))
    if remedy is not None and remedy not in entry.remedies:
        raise ValueError('%s: remedy %r is not registered' % (code, remedy))
    own = _scope_places(entry.scope, host)
    at = own if at is None else at
    path = own if path is None and code in SYMPTOMS else path
    if not at and entry.explains:
        raise ValueError('%s explains other findings: its rule must say where it sits (at=[places])' % code)
    values = dict(values, host=host, subject=subject)
    text = (entry.remedies[remedy] if remedy is not None else entry.remedy) % values
    return {'id': '%s@%s/%s' % (code, host or 'fleet', subject or '-'), 'code': code, 'layer': layer, 'severity': severity,
            'host': host, 'subject': subject, 'evidence': evidence, 'cause': cause, 'remedy': text, 'explained_by': None,
            'at': places(at), 'path': places(path)}


def _scope_places(scope: Optional[str], host: Optional[str]) -> Optional[List[Place]]:
    if scope == 'node':
        return [('node', host)] if host else None
    fleet_wide: Dict[Optional[str], List[Place]] = {'fabric': [('fabric',)], 'run': [('run',)]}
    return fleet_wide.get(scope)


# Places that belong to one node (their second part is the host).
HOST_PLACES = ('node', 'hca', 'hca_host', 'gpu', 'gpu_nic', 'gpus')


def on_path(at: Optional[Iterable[Place]], path: Optional[Iterable[Place]]) -> bool:
    """Is one of the places ``at`` (a root's) on ``path`` (a symptom's)? A place is on a path
    that holds it; a node's place ('node', host) is on every path through that host (a node-wide
    cause: the peer-memory chain, the kernel, memlock, the governor). No places: never (fail closed)."""
    if not at or not path:
        return False
    path = [[str(part) for part in place] for place in path]
    hosts = set(place[1] for place in path if len(place) > 1 and place[0] in HOST_PLACES)
    for place in at:
        place = [str(part) for part in place]
        if place in path or (place[0] == 'node' and len(place) > 1 and place[1] in hosts):
            return True
    return False


def named(root: str, symptom: Finding) -> bool:
    """Does the symptom itself name the root's kind of cause? GPUDirect RDMA not used, or GPU memory
    slower than or failing where host memory did not (the GPU's side of the test): a root that breaks
    GPUDirect RDMA or costs GPU memory (the registry's gpu_memory: the peer-memory chain, ACS, a far NIC,
    IOMMU translation) - and GPU memory that could not be registered (mr_failed) names it too; a buffer
    that could not be registered (mr_failed): the locked-memory limit.
    ``root``: a code."""
    if root in REGISTRY and REGISTRY[root].gpu_memory:
        return gdr_not_used(symptom) or symptom.get('code') in (BENCH_GPU_MEMORY_LOW, BENCH_GPU_MEMORY_FAILED) or (
            _gpu_memory_test(symptom) and _failure_kind(symptom) == 'mr_failed')
    if root in (HOST_LOST, HOST_TASK_FAILED) and _failure_kind(symptom) in ('node_lost', 'peer_lost'):
        # The pair's own failure says a node of it stopped answering: that node's loss, not a device on the way.
        return True
    if root == COLLECTIVE_GPUS_NOT_P2P:
        # The run's own log says how its GPUs talked: that, not a node-wide setting, is why it was slow.
        return symptom.get('code') in (COLLECTIVE_NODE_SLOW, COLLECTIVE_BUSBW_LOW, COLLECTIVE_CULPRIT)
    if root == GPU_BUSY:
        # The run itself was contaminated: another process held its GPUs while it ran (the idle gate).
        return bool(_mapping(symptom.get('evidence')).get('contaminated'))
    return root == HOST_MEMLOCK_LIMITED and _failure_kind(symptom) == 'mr_failed'


def places(items: Optional[Iterable[Place]]) -> Optional[List[List[str]]]:
    """Places as lists (JSON), in a stable order, each once; None stays None."""
    if items is None:
        return None
    seen = []
    for item in items:
        place = [str(part) for part in item]
        if place not in seen:
            seen.append(place)
    return seen


def markdown_rows() -> List[str]:
    """The codes table of docs/report.md (its header and rows), in registry order."""
    def cell(text: str) -> str:
        return text.replace('|', '\\|')
    rows = ['| code | layer | severity | found from | explained by |', '|---|---|---|---|---|']
    for code, entry in REGISTRY.items():
        severity = entry.severity + ''.join(' (%s %s)' % (other, when) for other, when in sorted(entry.other.items()))
        roots = ['%s (%s)' % (root, REGISTRY[root].explains[code][1]) if REGISTRY[root].explains[code] else root
                 for root in REGISTRY if code in REGISTRY[root].explains]
        explained = ' %s |' % ', '.join(roots) if roots else ' |'
        rows.append('| `%s` | %s | %s | %s |%s' % (code, ', '.join(entry.layers), severity, cell(entry.doc), explained))
    return rows
