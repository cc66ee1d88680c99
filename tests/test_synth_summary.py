"""The summary `make synth` prints: stacks and resource counts by type."""

from __future__ import annotations

from llm_infra.cli.synth_summary import summarize


def test_summary_counts_every_resource_of_every_stack(default_app) -> None:
    text = summarize(default_app.outdir)
    total = sum(len(t["Resources"]) for t in default_app.templates.values())
    assert text.splitlines()[-1] == f"total: {total} resources in 3 stacks"
    cluster = default_app.template("-cluster")
    assert f"llm-infra-cluster: {len(cluster['Resources'])} resources" in text
    assert "     7  AWS::EKS::Addon" in text
