#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: gdr_facts
short_description: GPUDirect RDMA readiness facts (topology, ACS, peer memory, mm_kobj, OFED)
version_added: 0.1.0
description:
  - Finds the GPUs (NVIDIA, AMD, MetaX) and RDMA NICs on the PCI tree in sysfs and computes for
    every GPU x NIC pair the distance class C(PIX), C(PXB), C(PHB), C(NODE) or C(SYS) (the classes
    C(nvidia-smi topo -m) and C(mx-smi topo -n) print) and each GPU's nearest NIC.
  - Reads the PCIe link of every GPU and RDMA NIC and of the bridges above them (speed and width against what
    both ends of each link can do) and the IOMMU mode of their groups.
  - Reads the ACS capability and control registers (PCI extended capability 0x000D) of every
    bridge on a GPU<->NIC path and says whether ACS redirects peer-to-peer traffic.
    Extended config space is readable by root only; without it ACS is reported unknown.
  - Checks the peer-memory path each vendor's collective library looks for (loaded modules,
    C(/sys/kernel/mm/memory_peers/<client>/version)), whether the running kernel exports
    C(mm_kobj), the OFED version and whether it was built with C(HAVE_MM_KOBJ_EXPORTED), and
    whether the dma-buf path is possible.
  - Sums it up in C(gdr_ready) with C(reasons) that spell out the causal chain.
  - Reads the host settings RDMA jobs depend on into C(host) - the CPU frequency governors, the
    locked-memory limit this process got and where the node configures it (limits.conf, limits.d,
    C(DefaultLimitMEMLOCK)), the modules loaded now and those loaded at boot (modules-load.d,
    C(/etc/modules)), and the interface of the IPv4 default route.
  - Runs no external tool.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - hpc.gpu_fabric.root
  - hpc.gpu_fabric.root.facts
options: {}
'''

EXAMPLES = r'''
- name: Gather GPUDirect RDMA facts
  hpc.gpu_fabric.gdr_facts:
  become: true  # extended PCI config space (ACS) is readable by root only

- name: Stop when GPUDirect RDMA cannot work
  ansible.builtin.assert:
    that: ansible_facts.gpu_fabric_gdr.gdr_ready
    fail_msg: "{{ ansible_facts.gpu_fabric_gdr.reasons }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu_fabric_gdr:
      description: GPUDirect RDMA facts.
      type: dict
      returned: always
      contains:
        gpus:
          description: GPUs in PCI order with vendor, NUMA node and nearest RDMA NIC.
          type: list
          elements: dict
          returned: always
          sample:
            - name: GPU0
              pci_address: "0000:08:00.0"
              vendor: metax
              vendor_id: "0x9999"
              device_id: "0x4001"
              numa_node: 0
              driver: metax
              nearest_nic: mlx5_0
              nearest_nic_distance: PXB
        nics:
          description: RDMA NICs with PCI address and NUMA node.
          type: list
          elements: dict
          returned: always
        topology:
          description: One entry per GPU x NIC pair with C(distance), the C(bridges) between them and C(acs_redirect).
          type: list
          elements: dict
          returned: always
        matrix:
          description: GPU name -> NIC name -> distance class.
          type: dict
          returned: always
          sample: {GPU3: {mlx5_0: PIX, mlx5_1: NODE}}
        acs:
          description: ACS state of each bridge on a GPU<->NIC path.
          type: list
          elements: dict
          returned: always
          sample:
            - pci_address: "0000:10:10.0"
              readable: true
              present: true
              cap: 95
              ctl: 0
              cap_flags: [SrcValid, TransBlk, ReqRedir, CmpltRedir, UpstreamFwd, DirectTrans]
              ctl_flags: []
              redirects_p2p: false
              paths: [GPU3-mlx5_0]
        pcie_links:
          description:
            - One entry per PCIe link on the way from a GPU or an RDMA NIC up to its root port, read from sysfs
              (C(current_link_speed), C(current_link_width), C(max_link_speed), C(max_link_width) of both ends).
            - C(upstream) and C(downstream) are the two ends (C(upstream) null for a device on the root bus);
              C(kind) (C(gpu), C(nic) or C(bridge)) and C(device) name the lower end; C(gpus) and C(nics) are the
              devices whose traffic to the host crosses the link.
            - C(speed_gts) and C(width) are what the link trained at, C(max_speed_gts)/C(max_width) and
              C(upstream_max_speed_gts)/C(upstream_max_width) what each end can do, C(capable_speed_gts)/C(capable_width)
              the lower of the two; C(gbps) and C(capable_gbps) the data bandwidth after line encoding (8b/10b below
              8 GT/s, 128b/130b from 8 to 32 GT/s, as the kernel computes it).
            - C(degraded) is true when the link trained narrower, or slower, than both ends can do, null when it could not
              be judged (C(reason)); C(gpu_idle_speed) marks a GPU's own link below its speed, which is the GPU's power
              saving at idle and not judged; C(by) says whether the ends were told apart by their PCI Express port
              type (config space, root) or by their position in the tree.
          type: list
          elements: dict
          returned: always
          sample:
            - upstream: "0000:19:01.0"
              downstream: "0000:1b:00.0"
              kind: nic
              device: mlx5_0
              gpus: []
              nics: [mlx5_0]
              speed_gts: 32.0
              width: 8
              max_speed_gts: 32.0
              max_width: 16
              upstream_max_speed_gts: 32.0
              upstream_max_width: 16
              capable_speed_gts: 32.0
              capable_width: 16
              gbps: 252.056
              capable_gbps: 504.112
              degraded: true
              width_degraded: true
              speed_degraded: false
              gpu_idle_speed: false
              by: port type
              reason: null
              raw: {current_link_speed: 32.0 GT/s PCIe, current_link_width: "8", max_link_speed: 32.0 GT/s PCIe, max_link_width: "16"}
        iommu:
          description:
            - The IOMMU mode of the GPUs and RDMA NICs. C(devices) per device its IOMMU C(group)
              (null - no IOMMU handles its DMA), the group's C(type) (C(/sys/kernel/iommu_groups/<n>/type)) and C(mode)
              (C(passthrough) for identity, C(translated) for DMA or DMA-FQ, C(vfio), C(blocked), C(none), C(unknown)).
            - C(units) the IOMMU hardware units (C(/sys/class/iommu)); C(cmdline) the IOMMU parameters of
              C(/proc/cmdline) and C(cmdline_mode) what they ask for; C(translated) the devices whose DMA is translated;
              C(mode) the node's summary (C(passthrough), C(translated), C(mixed), C(off), C(unknown)).
          type: dict
          returned: always
          sample:
            units: [dmar0, dmar1]
            cmdline: {intel_iommu: "on", iommu: pt}
            cmdline_mode: passthrough
            devices:
              - {name: GPU0, kind: gpu, pci_address: "0000:1a:00.0", group: "6", type: identity, mode: passthrough}
            translated: []
            mode: passthrough
        peer_memory:
          description: Loaded peer-memory modules, memory_peers clients, and per GPU vendor whether its library detects peer memory.
          type: dict
          returned: always
        peer_memory_build:
          description:
            - Each separate peer-memory module (C(nvidia_peermem), C(nv_peer_mem)) loaded or installed for the running kernel,
              against the loaded NVIDIA driver (C(/sys/module/nvidia/version), else C(/proc/driver/nvidia/version)).
            - C(loaded_version) from C(/sys/module/<module>/version); C(file) the module modprobe would load (C(modules.dep)),
              C(file_version) and C(file_vermagic) from its ELF C(.modinfo) section (C(file_state) says why not read, e.g. a
              C(.ko.zst)).
            - C(state) C(match), C(mismatch) or C(unknown) (C(nv_peer_mem) carries its own version, so no comparison is
              valid; or a version was not read), and C(why) in words. Empty without an NVIDIA driver or peer-memory module.
          type: list
          elements: dict
          returned: always
          sample:
            - {module: nvidia_peermem, loaded: true, loaded_version: 570.124.06, driver_version: 570.133.20,
               driver_source: /proc/driver/nvidia/version, state: mismatch}
        rdma_unbound:
          description:
            - PCI functions of an RDMA-capable class (InfiniBand; Mellanox/NVIDIA Ethernet; Broadcom C(bnxt_en) and Intel
              C(ice)/C(i40e) Ethernet with C(strict) false) with no RDMA device in C(/sys/class/infiniband), except those
              bound to C(vfio-pci) or C(pci-stub).
            - C(driver) the bound driver (null - its probe failed, or none claims it), C(why) in words, C(log) the last kernel
              log lines naming the function (C(/dev/kmsg), read only when there is such a function), C(log_state) C(read) or why not.
          type: list
          elements: dict
          returned: always
          sample:
            - {bdf: "0000:1b:00.0", vendor: "0x15b3", class: "0x020700", driver: null, strict: true, log_state: read,
               log: ["mlx5_core: probe of 0000:1b:00.0 failed with error -22"]}
        kernel:
          description: Kernel release and whether it exports C(mm_kobj) (and where that was seen).
          type: dict
          returned: always
          sample: {release: 5.14.0-570.el9_6.x86_64, mm_kobj_exported: false, mm_kobj_source: /proc/kallsyms}
        ofed:
          description: OFED version and whether its build defined C(HAVE_MM_KOBJ_EXPORTED).
          type: dict
          returned: always
        dmabuf:
          description: Whether the dma-buf path is possible, and why not.
          type: dict
          returned: always
        gdr_ready:
          description: True when every GPU vendor on the node has a working GPUDirect RDMA path to a near NIC.
          type: bool
          returned: always
        reasons:
          description: Why C(gdr_ready) is false, each a causal chain in words.
          type: list
          elements: str
          returned: always
        notes:
          description: Observations that do not block GPUDirect RDMA (for example a missing peer-memory module where dma-buf stands in).
          type: list
          elements: str
          returned: always
        host:
          description: Host settings RDMA jobs depend on, read from files only.
          type: dict
          returned: always
          contains:
            cpufreq:
              description: Whether any CPU has a cpufreq directory (a cpufreq driver runs; VMs usually have none).
              type: bool
              returned: always
            cpu_governors:
              description: Governor name -> number of CPUs running it (C(cpuN/cpufreq/scaling_governor)); empty without cpufreq.
              type: dict
              returned: always
              sample: {performance: 112}
            memlock:
              description:
                - C(soft) and C(hard) RLIMIT_MEMLOCK of this process in bytes or C(unlimited) (C(/proc/self/limits)),
                  null when unreadable; C(cap_ipc_lock) whether it has CAP_IPC_LOCK, which lifts the limit for RDMA
                  registrations (null when unknown).
                - C(limits_conf) the memlock entries of C(/etc/security/limits.conf) and C(limits.d/*.conf) (domain, type,
                  value as written, bytes, file); C(systemd) the C(DefaultLimitMEMLOCK=) settings of system.conf and its
                  drop-ins in the order systemd applies them (value, soft, hard, file).
              type: dict
              returned: always
              sample:
                soft: unlimited
                hard: unlimited
                cap_ipc_lock: false
                limits_conf:
                  - {domain: "*", type: soft, value: unlimited, bytes: unlimited, file: /etc/security/limits.d/90-gpu-fabric-memlock.conf}
                systemd:
                  - {value: "infinity:infinity", soft: unlimited, hard: unlimited, file: /etc/systemd/system.conf.d/90-gpu-fabric-memlock.conf}
            modules_loaded:
              description: Names of the loaded kernel modules (C(/proc/modules)).
              type: list
              elements: str
              returned: always
            modules_persistent:
              description:
                - Module name -> the files that load it at boot - C(modules-load.d/*.conf) of /etc, /run, /usr/local/lib,
                  /usr/lib and /lib (masking honoured), Debian's C(/etc/modules), rdma-core's C(/etc/rdma/modules/*.conf)
                  and C(modules_load=) on the kernel command line. A C(-) in a name is read as C(_).
              type: dict
              returned: always
              sample: {nvidia_peermem: [/etc/modules-load.d/gpu-fabric.conf]}
            default_route_interface:
              description: Interface of the IPv4 default route with the lowest metric (C(/proc/net/route)), null when there is none.
              type: str
              returned: always
              sample: eth0
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import read_gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._host import read_host
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import list_rdma_devices
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import without_surrogates
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot


def main():
    module = AnsibleModule(
        argument_spec=dict(root=dict(type='path', default='/')),
        supports_check_mode=True,
    )
    root = module.params['root']
    if not os.path.isdir(root):
        module.fail_json(msg='root %s is not a directory: give / or the path of an unpacked node snapshot' % root)
    sysroot = SysRoot(root)
    facts = read_gdr(sysroot, list_rdma_devices(sysroot))
    facts['host'] = read_host(sysroot)
    facts['root'] = root
    # Names read from the tree (a file, a link target) that are not UTF-8 are reported as
    # U+FFFD with a warning: one bad name must not cost the node its other facts.
    facts = without_surrogates(facts, sysroot.warn, 'gpu_fabric_gdr')
    for warning in sysroot.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={'gpu_fabric_gdr': facts})


if __name__ == '__main__':
    main()
