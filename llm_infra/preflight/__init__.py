"""``llm-infra preflight``'s account checks before a deploy (``checks``) and what a deploy would replace
(``create_only``, from cfn-lint's resource schemas)."""
