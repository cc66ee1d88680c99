"""``python -m llm_infra.cli``: the ``llm-infra`` command."""

import sys

from llm_infra.cli import main

sys.exit(main())
