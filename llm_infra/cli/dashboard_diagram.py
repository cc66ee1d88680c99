"""Draw a CloudWatch dashboard's layout from its synthesized JSON: widgets, their metrics, alarms.

CloudWatch renders dashboards only in an AWS account; this gives the README (and reviewers of a
template change) a picture of what the dashboard shows, made from the template itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

GRID_COLUMNS = 24  # CloudWatch dashboards are 24 units wide
_CDK_HASH = re.compile(r"[0-9A-F]{8}$")


def _placeholder(token: dict[str, Any]) -> str:
    """``{"Ref": "X"}`` / ``{"Fn::GetAtt": ["X", "Arn"]}`` -> ``<X>``; other intrinsics -> ``<token>``."""
    if "Ref" in token:
        return f"<{token['Ref']}>"
    if "Fn::GetAtt" in token:
        return f"<{token['Fn::GetAtt'][0]}>"
    return "<token>"


def dashboard_body(template: dict[str, Any]) -> dict[str, Any]:
    """The ``DashboardBody`` of the template's one dashboard, references shown as ``<LogicalId>``."""
    resources = template.get("Resources") if isinstance(template, dict) else None
    if not isinstance(resources, dict):
        raise ValueError("not a CloudFormation template: no Resources object")
    dashboards = [r for r in resources.values() if r.get("Type") == "AWS::CloudWatch::Dashboard"]
    if len(dashboards) != 1:
        raise ValueError(f"template: expected one AWS::CloudWatch::Dashboard, found {len(dashboards)}")
    body = dashboards[0]["Properties"]["DashboardBody"]
    if isinstance(body, dict):  # {"Fn::Join": ["", [str | token, ...]]}
        separator, parts = body["Fn::Join"]
        body = separator.join(p if isinstance(p, str) else _placeholder(p) for p in parts)
    return json.loads(body)


def widget_lines(widget: dict[str, Any], resources: dict[str, Any]) -> list[str]:
    """What a widget shows: one line per metric (``namespace metric (stat)``), or per alarm with
    its threshold (alarms are looked up in the template's ``resources``)."""
    props = widget["properties"]
    if widget["type"] == "alarm":
        lines = []
        for reference in props.get("alarms", []):
            logical_id = reference.strip("<>")
            alarm = resources.get(logical_id, {}).get("Properties", {})
            rule = f"{alarm.get('ComparisonOperator', '?')} {alarm.get('Threshold', '?')}"
            watched = alarm.get("MetricName", "metric math")
            lines.append(f"{_CDK_HASH.sub('', logical_id)}: {watched} {rule}")
        return lines
    lines = []
    for metric in props.get("metrics", []):
        options = metric[-1] if metric and isinstance(metric[-1], dict) else {}
        if "expression" in options:
            lines.append(f"= {options['expression']}")
        elif len(metric) > 1:
            stat = options.get("stat", props.get("stat", "Average"))
            lines.append(f"{metric[0]} {metric[1]} ({stat})")
    for annotation in props.get("annotations", {}).get("horizontal", []):
        lines.append(f"--- {annotation.get('label', '')} {annotation['value']:g}")
    return lines


def render(template: dict[str, Any], out: Path, *, title: str = "") -> list[str]:
    """Draw the template's dashboard, every widget at its grid position, into ``out`` (PNG).

    Returns the widget titles in order.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    widgets = dashboard_body(template)["widgets"]
    rows = max(w["y"] + w["height"] for w in widgets)
    figure, axes = plt.subplots(figsize=(16, rows * 0.75))
    axes.set_xlim(0, GRID_COLUMNS)
    axes.set_ylim(rows, 0)
    axes.axis("off")
    titles = []
    for widget in widgets:
        x, y, width, height = widget["x"], widget["y"], widget["width"], widget["height"]
        heading = widget["properties"].get("title", widget["type"])
        titles.append(heading)
        axes.add_patch(
            FancyBboxPatch(
                (x + 0.1, y + 0.1),
                width - 0.2,
                height - 0.2,
                boxstyle="round,pad=0,rounding_size=0.2",
                facecolor="#f4f6f8" if widget["type"] == "metric" else "#fdf3e7",
                edgecolor="#5a6b7b",
            )
        )
        axes.text(x + 0.4, y + 0.6, heading, fontsize=10, fontweight="bold", va="center")
        for index, line in enumerate(widget_lines(widget, template["Resources"])):
            axes.text(x + 0.4, y + 1.3 + 0.5 * index, line, fontsize=7.5, va="center", family="monospace")
    if title:
        figure.suptitle(title, fontsize=12)
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return titles
