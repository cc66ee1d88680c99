"""llm-infra: CDK constructs and cdk8s charts for resilient distributed LLM training on AWS.

The design card keeps ``constructs/``, ``stacks/``, ``k8s_manifests/`` and ``workloads/`` at the
repository root. Those folders have no ``__init__.py`` so that the root folder ``constructs/``
never shadows the ``constructs`` library that aws-cdk-lib imports. An installed wheel maps them to
``llm_infra.constructs`` etc. through setuptools ``package-dir``; in a source checkout this module
extends its own ``__path__`` with the repository root so the same import names work.

Keep this module free of heavy imports: the torch payload and the CLI import it too.
"""

from pathlib import Path

__version__ = "0.1.0"

_repo_root = Path(__file__).resolve().parent.parent
if (_repo_root / "pyproject.toml").is_file() and (_repo_root / "constructs").is_dir():
    __path__.append(str(_repo_root))  # noqa: F821 - module attribute of a package
