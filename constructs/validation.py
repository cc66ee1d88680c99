"""Construct validation as aws-cdk-lib does it: in the constructor (so at synth), scoped to the construct,
naming the prop and what it allows; values that may be tokens are checked only once they are known.

aws-cdk-lib's own ``ValidationError`` (``throw new ValidationError(..., this)``) is not part of its jsii
API: the Python package exports only ``aws_cdk.Errors``, whose ``is_validation_error()`` recognizes the
JavaScript class and nothing raised from Python. :class:`ConstructValidationError` is the Python
counterpart: a ``ValueError`` that carries the construct's path (``construct_path``) and starts its
message with it, as the CDK CLI prints a ``ValidationError`` with the construct it came from.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import IConstruct


class ConstructValidationError(ValueError):
    """A construct's props break its rules. ``construct_path`` names the construct, ``detail`` the prop,
    the value and what is allowed; the message is ``<construct path>: <detail>``."""

    def __init__(self, scope: IConstruct, detail: str) -> None:
        self.construct_path = scope.node.path
        self.detail = detail
        super().__init__(f"{self.construct_path}: {detail}")


def is_token(value: Any) -> bool:
    """Whether ``value`` (a string, number or list) is a token: a CfnParameter, an import, an attribute of
    another resource. Its value is unknown until deploy, so checks on it are skipped."""
    if isinstance(value, tuple):  # jsii passes lists, not tuples
        value = list(value)
    return bool(cdk.Token.is_unresolved(value))


def require_literal(scope: IConstruct, prop: str, value: Any, why: str) -> None:
    """``prop`` decides what the template holds, so it must be known at synth, not a token."""
    if is_token(value):
        raise ConstructValidationError(scope, f"{prop}: must be known at synth, not a token ({why})")
