# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from typing import Any, Callable

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _html, _report, _report_stage


def fabric_report(hostvars: Any, hosts: Any, bench: dict[str, Any] | None = None, collective: dict[str, Any] | None = None,
                  generated_at: str | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    # The same code as the report stage's action (plugins/action/fabric_report_write.py).
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('fabric_report: hosts must be a list of inventory names')
    try:
        model = _fleet_model.read(hostvars, hosts, ('facts', 'run'))
    except ValueError as exc:
        raise AnsibleFilterError('fabric_report: %s' % exc)
    return _report_stage.from_model(model, bench, collective, generated_at, options)


def report_drift(report: dict[str, Any], baseline: dict[str, Any] | None, regression_pct: float = 10.0) -> dict[str, Any]:
    try:
        return _report_stage.with_drift(report, baseline, regression_pct)
    except ValueError as exc:
        raise AnsibleFilterError('report_drift: %s' % exc)


def report_policy(report: dict[str, Any], expression: str = _report.DEFAULT_POLICY) -> Any:
    try:
        return _report.policy(report, expression or _report.DEFAULT_POLICY)
    except ValueError as exc:
        raise AnsibleFilterError('report_policy: %s' % exc)


class FilterModule(object):

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            'fabric_report': fabric_report,
            'report_drift': report_drift,
            'report_policy': report_policy,
            'report_markdown': _report.markdown,
            'report_html': _html.render,
            'report_junit': _report.junit,
            'report_prometheus': _report.prometheus,
        }
