"""The topics.yaml registry: typed model, loader and the standard's policy."""

from .loader import Problem, RegistryInvalid, load_registry, parse_retention
from .model import Acl, Group, LagThresholds, Principal, Registry, Topic

__all__ = ["Acl", "Group", "LagThresholds", "Principal", "Problem", "Registry",
           "RegistryInvalid", "Topic", "load_registry", "parse_retention"]
