"""Campaign configuration: the schema and the one loader (the only package that reads YAML).

A campaign is one YAML file.  Unknown keys and wrong types are refused with a message that names
the key, the bad value and what is allowed.  Relative paths are taken relative to the directory
the command runs in.

- :mod:`~gwbatch.config.yamlfile` reads every file and ``--set`` value within limits checked
  before anything is built: at most :data:`MAX_YAML_BYTES`, strict UTF-8 without control
  characters, nesting at most :data:`MAX_YAML_DEPTH` deep, at most :data:`MAX_YAML_NODES` values
  once aliases are expanded, safe tags only and no key given twice;
- :mod:`~gwbatch.config.strict` checks every field against its annotation first (a boolean or a
  text is never a number) and :mod:`~gwbatch.config.limits` gives every number finite bounds;
- :mod:`~gwbatch.config.schema` is the campaign's shared sections and keys, each documented; the
  ``search`` section is each registered search's own (``gwbatch/searches/<kind>.py``), and the
  :class:`Campaign` model is assembled from them on first use (:func:`campaign_model`);
- :mod:`~gwbatch.config.loading` loads campaigns, multi-search campaigns and banks, applies
  ``--set`` overrides and words the refusals (:mod:`~gwbatch.config.text` keeps them short);
- :mod:`~gwbatch.config.physical` adds the rules that need the data's sample rate.
"""

from gwbatch.config.limits import (
    MAX_ERROR_LINES,
    MAX_PATH,
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    RESERVED_NAMES,
)
from gwbatch.config.loading import (
    MEMBER_SECTIONS,
    Suite,
    apply_override,
    format_validation_error,
    load_bank_config,
    load_campaign,
    load_run,
    validate_campaign,
    validate_suite,
)
from gwbatch.config.physical import physical_bounds
from gwbatch.config.schema import (
    JOBQUEUE_KINDS,
    BackgroundConfig,
    BankConfig,
    ClusterConfig,
    CoincidenceConfig,
    ConditioningConfig,
    DataConfig,
    GatingConfig,
    JobqueueConfig,
    OutputConfig,
    PlacementConfig,
    PlanConfig,
    PSDConfig,
    SpiirFilterConfig,
    campaign_model,
    search_sections,
)
from gwbatch.config.strict import StrictModel, check_path
from gwbatch.config.yamlfile import read_yaml, read_yaml_file

__all__ = [
    "MAX_ERROR_LINES", "MAX_PATH", "MAX_YAML_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "RESERVED_NAMES",
    "MEMBER_SECTIONS", "Suite", "apply_override", "format_validation_error", "load_bank_config", "load_campaign",
    "load_run", "validate_campaign", "validate_suite", "physical_bounds", "JOBQUEUE_KINDS", "campaign_model",
    "search_sections", "BackgroundConfig", "BankConfig", "Campaign", "ClusterConfig", "CoincidenceConfig",
    "ConditioningConfig", "DataConfig", "GatingConfig", "JobqueueConfig", "OutputConfig", "PlacementConfig",
    "PlanConfig", "PSDConfig", "SpiirFilterConfig",
    "StrictModel", "check_path", "read_yaml", "read_yaml_file",
]


def __getattr__(name: str):
    """``Campaign`` is built on first use, from the registered searches' sections."""
    if name == "Campaign":
        return campaign_model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
