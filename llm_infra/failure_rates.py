"""Published failure rates of large training runs, % per instance-hour: the planner's presets, and the
node MTBF the recipes checkpoint by."""

FAILURE_PRESETS = {
    "opt-175b": 0.0588,  # Meta OPT-175B logbook (Zhang et al. 2022)
    "llama3-16k-h100": 0.0161,  # Llama 3.1 on 16k H100 (Meta 2024: 419 interruptions in 54 days)
    "mpt-7b": 0.0319,  # MosaicML MPT-7B training report
}


def instance_mtbf_hours(preset: str) -> float:
    """The mean hours between failures of one instance at a preset's rate."""
    return 100.0 / FAILURE_PRESETS[preset]
