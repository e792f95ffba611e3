# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):

    # The directory the controller-side writers (fabric_output, fabric_bench_judge, fabric_report_write)
    # write into: one description of it, as plugin_utils/report/_files.py write_files treats it for all three.
    DOCUMENTATION = r'''
options:
  dest:
    description:
      - The directory on the controller. Created with its parents (mode 0755) when missing.
      - A relative path is relative to the directory C(ansible-playbook) runs in.
    type: path
    required: true
'''
