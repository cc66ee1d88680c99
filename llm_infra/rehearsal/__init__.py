"""The local rehearsal of a deploy: a real Kubernetes control plane on this machine (``control_plane``,
envtest-like, shared by ``llm-infra rehearse`` and the tests), what a deploy creates in the cluster as read
from the synthesized templates (``deploy_workloads``) and the pinned charts and add-ons
(``upstream_charts``), the upstream CRDs (``crds``), and ``rehearse`` itself."""
