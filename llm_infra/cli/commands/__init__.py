"""The subcommands of ``llm-infra``, one module per group; each has ``register(commands)``."""
