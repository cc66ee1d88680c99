"""TrainingObservability: the CloudWatch dashboard and alarms of a training cluster."""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from llm_infra.config import DEFAULT_FSX_FREE_ALARM_PERCENT, DEFAULT_STALL_MINUTES, DEFAULT_STALL_PERCENT
from llm_infra.constructs.validation import ConstructValidationError, require_literal

CONTAINER_INSIGHTS = "ContainerInsights"
FSX = "AWS/FSx"
GIB = 1024**3
# Fluent Bit of the CloudWatch add-on parses a JSON log line into this key of the log event.
PARSED_LOG = "$.log_processed"
HYPERPOD_UNHEALTHY_STATUSES = ("unschedulable_pending_replacement", "unschedulable_pending_reboot")
HYPERPOD_STATUSES = ("schedulable", "unschedulable", *HYPERPOD_UNHEALTHY_STATUSES)
# The Xids the EKS node monitoring agent calls fatal at its pin: it sets AcceleratedHardwareReady=False, on which
# EKS node auto repair reboots or replaces the node; any other Xid is a Kubernetes event only
# (aws/eks-node-monitoring-agent v1.7.0, monitors/nvidia/dcgm/dcgm_policies.go, WellKnownXidCodes).
NODE_AUTO_REPAIR_XIDS = (46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158)


def payload_filter(event: str, extra: str = "") -> logs.IFilterPattern:
    """Log events whose parsed JSON line has ``"event": <event>`` (and ``extra``, a pattern clause)."""
    clause = f'{PARSED_LOG}.event = "{event}"' + (f" && {extra}" if extra else "")
    return logs.FilterPattern.literal(f"{{ {clause} }}")


class TrainingObservability(Construct):
    """Dashboard, metrics and alarms for one training cluster; alarms notify an encrypted SNS topic.

    Sources, all managed except the payload's own lines: Container Insights (the
    amazon-cloudwatch-observability add-on: GPU utilisation and memory, EFA bytes, failed nodes,
    HyperPod node health), FSx for Lustre's ``AWS/FSx`` metrics, and metric filters on the
    add-on's application log group that read the JSON lines of ``train.py`` (tokens/s, loss,
    the throughput heartbeat) and ``xid_monitor.py`` (Xid errors).

    Alarms: a failed node; a HyperPod node pending reboot or replacement; a fatal GPU Xid that
    nothing repairs (``repaired_xids``: the Xids a platform agent already marks for repair, such as
    :data:`NODE_AUTO_REPAIR_XIDS` with the EKS node monitoring agent, are left to it); FSx free capacity
    below ``fsx_free_percent``; a stalled job (the heartbeat's tokens/s below ``stall_fraction`` of its
    recent median for ``stall_minutes``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        application_log_group: logs.ILogGroup,
        file_system_id: str,
        fsx_storage_gib: int,
        metric_namespace: str,
        hyperpod: bool = False,
        stall_fraction: float = DEFAULT_STALL_PERCENT / 100,
        stall_minutes: int = DEFAULT_STALL_MINUTES,
        fsx_free_percent: float = float(DEFAULT_FSX_FREE_ALARM_PERCENT),
        alarm_emails: Sequence[str] = (),
        dashboard_name: str | None = None,
        repaired_xids: Sequence[int] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        # Thresholds and periods are computed here (math expressions, evaluation periods): known at synth.
        for prop, value in (
            ("stall_fraction", stall_fraction),
            ("stall_minutes", stall_minutes),
            ("fsx_free_percent", fsx_free_percent),
            ("fsx_storage_gib", fsx_storage_gib),
        ):
            require_literal(self, prop, value, "alarm thresholds and periods are computed from it")
        if not 0 < stall_fraction < 1:
            raise ConstructValidationError(self, f"stall_fraction: {stall_fraction} must lie strictly between 0 and 1")
        if stall_minutes < 5 or stall_minutes % 5:
            raise ConstructValidationError(
                self, f"stall_minutes: {stall_minutes} must be a multiple of 5 (the alarm period), >= 5"
            )
        if not 0 < fsx_free_percent < 100:
            raise ConstructValidationError(
                self, f"fsx_free_percent: {fsx_free_percent} must lie strictly between 0 and 100"
            )
        if fsx_storage_gib < 1:
            raise ConstructValidationError(self, f"fsx_storage_gib: {fsx_storage_gib} must be >= 1")
        self.cluster_name = cluster_name
        self.metric_namespace = metric_namespace
        self.hyperpod = hyperpod
        self.repaired_xids = tuple(repaired_xids)

        self.alarm_topic = self._alarm_topic(alarm_emails)
        self._payload_metric_filters(application_log_group)
        self.fsx_free_percent = cloudwatch.MathExpression(
            expression=f"100 * free / {fsx_storage_gib * GIB}",
            using_metrics={"free": self._fsx("FreeDataStorageCapacity", file_system_id, "Minimum")},
            label="FSx free capacity (%)",
            period=cdk.Duration.minutes(5),
        )
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._alarms(stall_fraction, stall_minutes, fsx_free_percent)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=dashboard_name)
        self._widgets(file_system_id, stall_fraction)

    # ---- metrics ------------------------------------------------------------------------------
    def container_insights_metric(
        self, name: str, statistic: str = "Average", label: str | None = None
    ) -> cloudwatch.Metric:
        """A cluster-level Container Insights metric (``ClusterName`` dimension), one-minute period."""
        return cloudwatch.Metric(
            namespace=CONTAINER_INSIGHTS,
            metric_name=name,
            dimensions_map={"ClusterName": self.cluster_name},
            statistic=statistic,
            period=cdk.Duration.minutes(1),
            label=label,
        )

    def payload_metric(self, name: str, statistic: str = "Average", period_minutes: int = 1) -> cloudwatch.Metric:
        """A metric that the metric filters derive from the payload's JSON lines."""
        return cloudwatch.Metric(
            namespace=self.metric_namespace,
            metric_name=name,
            statistic=statistic,
            period=cdk.Duration.minutes(period_minutes),
        )

    @staticmethod
    def _fsx(name: str, file_system_id: str, statistic: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=FSX,
            metric_name=name,
            dimensions_map={"FileSystemId": file_system_id},
            statistic=statistic,
            period=cdk.Duration.minutes(5),
        )

    def _payload_metric_filters(self, log_group: logs.ILogGroup) -> None:
        filters = {
            # name: (event, extra clause, value)
            "TokensPerSecond": ("step", "", f"{PARSED_LOG}.tokens_per_s"),
            "TrainingLoss": ("step", "", f"{PARSED_LOG}.loss"),
            "ThroughputVsMedian": ("throughput", f"{PARSED_LOG}.vs_median >= 0", f"{PARSED_LOG}.vs_median"),
            "GpuXidErrors": ("gpu_xid", "", "1"),
            "FatalGpuXidErrors": ("gpu_xid", " && ".join(self._unrepaired_fatal_clauses()), "1"),
        }
        for name, (event, extra, value) in filters.items():
            logs.MetricFilter(
                self,
                f"{name}Filter",
                log_group=log_group,
                filter_pattern=payload_filter(event, extra),
                metric_namespace=self.metric_namespace,
                metric_name=name,
                metric_value=value,
            )

    def _unrepaired_fatal_clauses(self) -> list[str]:
        """A fatal Xid (as the health check judges it) that no platform agent marks for repair."""
        return [f"{PARSED_LOG}.fatal IS TRUE", *(f"{PARSED_LOG}.xid != {xid}" for xid in self.repaired_xids)]

    # ---- alarms -------------------------------------------------------------------------------
    def _alarm_topic(self, emails: Sequence[str]) -> sns.Topic:
        key = kms.Key(self, "AlarmTopicKey", enable_key_rotation=True, description="Training alarms SNS topic")
        # CloudWatch alarms publish to the encrypted topic with this key.
        key.grant(iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*")
        topic = sns.Topic(self, "AlarmTopic", master_key=key, enforce_ssl=True, display_name="Training alarms")
        for email in emails:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        return topic

    def _add_alarm(self, name: str, alarm: cloudwatch.Alarm) -> None:
        action = cloudwatch_actions.SnsAction(self.alarm_topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        self.alarms[name] = alarm

    def _alarms(self, stall_fraction: float, stall_minutes: int, fsx_free_percent: float) -> None:
        self._add_alarm(
            "NodeFailed",
            self.container_insights_metric("cluster_failed_node_count", "Maximum").create_alarm(
                self,
                "NodeFailedAlarm",
                alarm_description="A Kubernetes node of the training cluster has failed (Container Insights).",
                threshold=0,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
        )
        if self.hyperpod:
            self._add_alarm(
                "HyperPodNodeUnhealthy",
                cloudwatch.MathExpression(
                    expression=" + ".join(f"FILL(s{i}, 0)" for i in range(len(HYPERPOD_UNHEALTHY_STATUSES))),
                    using_metrics={
                        f"s{i}": self.container_insights_metric(f"hyperpod_node_health_status_{status}", "Sum")
                        for i, status in enumerate(HYPERPOD_UNHEALTHY_STATUSES)
                    },
                    label="HyperPod nodes pending reboot or replacement",
                    period=cdk.Duration.minutes(1),
                ).create_alarm(
                    self,
                    "HyperPodNodeUnhealthyAlarm",
                    alarm_description="HyperPod marked a node for reboot or replacement (health monitoring agent).",
                    threshold=1,
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                    evaluation_periods=1,
                    treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                ),
            )
        self._add_alarm(
            "GpuFatalXid",
            self.payload_metric("FatalGpuXidErrors", "Sum", 5).create_alarm(
                self,
                "GpuFatalXidAlarm",
                alarm_description=(
                    "A GPU logged a fatal Xid error that node auto repair does not act on (xid_monitor.py): the "
                    "node needs attention."
                    if self.repaired_xids
                    else "A GPU logged a fatal Xid error (xid_monitor.py): the node needs attention."
                ),
                threshold=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
        )
        self._add_alarm(
            "FsxFreeCapacityLow",
            self.fsx_free_percent.create_alarm(
                self,
                "FsxFreeCapacityLowAlarm",
                alarm_description=f"FSx for Lustre has less than {fsx_free_percent:g} % free capacity.",
                threshold=fsx_free_percent,
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=2,
                treat_missing_data=cloudwatch.TreatMissingData.MISSING,
            ),
        )
        self._add_alarm(
            "TrainingStalled",
            self.payload_metric("ThroughputVsMedian", "Maximum", 5).create_alarm(
                self,
                "TrainingStalledAlarm",
                alarm_description=(
                    f"Training tokens/s stayed below {stall_fraction:g} x its recent median for "
                    f"{stall_minutes} minutes (train.py's throughput heartbeat): a stalled job."
                ),
                threshold=stall_fraction,
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=stall_minutes // 5,
                # No heartbeat at all means no job is running (finished or not started): not a stall.
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
        )

    # ---- dashboard ----------------------------------------------------------------------------
    def _widgets(self, file_system_id: str, stall_fraction: float) -> None:
        ci = self.container_insights_metric
        height = 6
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="GPU utilisation (%)",
                left=[ci("node_gpu_utilization", "Average", "mean"), ci("node_gpu_utilization", "Minimum", "min")],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100),
                width=8,
                height=height,
            ),
            cloudwatch.GraphWidget(
                title="GPU memory used (%)",
                left=[
                    ci("node_gpu_memory_utilization", "Average", "mean"),
                    ci("node_gpu_memory_utilization", "Maximum", "max"),
                ],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100),
                width=8,
                height=height,
            ),
            cloudwatch.GraphWidget(
                title="GPU Xid errors",
                left=[self.payload_metric("GpuXidErrors", "Sum"), self.payload_metric("FatalGpuXidErrors", "Sum")],
                width=8,
                height=height,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="EFA bytes/s per node",
                left=[ci("node_efa_rx_bytes", "Average", "rx"), ci("node_efa_tx_bytes", "Average", "tx")],
                width=8,
                height=height,
            ),
            cloudwatch.GraphWidget(
                title="FSx throughput (bytes per 5 min)",
                left=[
                    self._fsx("DataReadBytes", file_system_id, "Sum"),
                    self._fsx("DataWriteBytes", file_system_id, "Sum"),
                ],
                width=8,
                height=height,
            ),
            cloudwatch.GraphWidget(
                title="FSx free capacity (%)",
                left=[self.fsx_free_percent],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100),
                left_annotations=[self.alarms["FsxFreeCapacityLow"].to_annotation()],
                width=8,
                height=height,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Nodes by health" + (" (HyperPod)" if self.hyperpod else ""),
                left=self._node_health_metrics(),
                stacked=True,
                width=8,
                height=height,
            ),
            cloudwatch.GraphWidget(
                title="Training tokens/s",
                left=[self.payload_metric("TokensPerSecond")],
                right=[self.payload_metric("ThroughputVsMedian", "Minimum")],
                right_annotations=[cloudwatch.HorizontalAnnotation(value=stall_fraction, label="stall threshold")],
                width=8,
                height=height,
            ),
            cloudwatch.GraphWidget(
                title="Training loss",
                left=[self.payload_metric("TrainingLoss")],
                width=8,
                height=height,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24, height=4)
        )

    def _node_health_metrics(self) -> list[cloudwatch.IMetric]:
        if self.hyperpod:
            return [
                self.container_insights_metric(f"hyperpod_node_health_status_{status}", "Sum", status)
                for status in HYPERPOD_STATUSES
            ]
        return [
            self.container_insights_metric("cluster_node_count", "Maximum", "nodes"),
            self.container_insights_metric("cluster_failed_node_count", "Maximum", "failed"),
        ]
