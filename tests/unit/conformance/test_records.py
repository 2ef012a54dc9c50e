"""The KEP suite's records: every test names known features, cites the KEP, and its manifests load."""

from __future__ import annotations

import re

import pytest

from conformance.kep import features, suite
from conformance.kep.tests import ALL, BY_NAME

VALUES = {"NAME": "n", "NAMESPACE": "ns", "NETWORK": "net", "NETWORKS": "[]", "NAD": "nad", "LABELS": "{}",
          "COMMAND": "[]", "RESTART": "Never", "PROBE_IMAGE": "busybox", "INGRESS": "[]",
          "NPWG_PROVIDER": "example.com/bridge", "SUFFIX": "abc123", "GATES": "[]", "IMAGE": "busybox",
          "PORT": "8080", "TYPE": "ClusterIP"}


def test_test_names_are_unique_and_short_camel_case() -> None:
    assert len(BY_NAME) == len(ALL)
    assert all(re.fullmatch(r"[A-Z][A-Za-z0-9]{3,40}", t.name) for t in ALL)


@pytest.mark.parametrize("test", ALL, ids=lambda t: t.name)
def test_each_test_names_known_features_and_cites_the_kep(test: suite.ConformanceTest) -> None:
    assert test.features and set(test.features) <= set(features.BY_NAME)
    assert re.search(r'KEP (Req \d+|")', test.spec), test.spec
    assert test.description.endswith(".")


@pytest.mark.parametrize("test", ALL, ids=lambda t: t.name)
def test_each_manifest_of_a_test_loads_with_its_placeholders_filled(test: suite.ConformanceTest) -> None:
    for name in test.manifests:
        docs = suite.load_manifest(name, VALUES)
        assert docs and all(d["apiVersion"] and d["kind"] and d["metadata"]["name"] for d in docs)


def test_a_manifest_placeholder_without_a_value_is_an_error_naming_it() -> None:
    with pytest.raises(KeyError, match="NETWORK"):
        suite.load_manifest("attachment.yaml", {"NAME": "n", "NAMESPACE": "ns"})


def test_every_feature_has_a_test_and_needs_something() -> None:
    for feature in features.FEATURES:
        assert any(feature.name in t.features for t in ALL), feature.name
        assert feature.needs


def test_profiles_core_is_the_core_features_and_extended_adds_the_rest_but_the_opt_in_ones() -> None:
    assert set(features.PROFILES["core"]) == {f.name for f in features.FEATURES if f.level is features.Level.CORE}
    assert set(features.PROFILES["extended"]) == set(features.BY_NAME) - {"DRAPlacement", "DRANetworkData"}
    assert set(features.PROFILES["core"]) < set(features.PROFILES["extended"])
    # an alternative way to place pods: only run when named, so no profile's run reports it missing
    assert features.OPT_IN == ("DRAPlacement", "DRANetworkData")
    assert features.resolve(["DRAPlacement"]) == ("DRAPlacement",)


def test_an_unknown_feature_is_refused_with_the_known_ones_listed() -> None:
    with pytest.raises(features.UnknownFeature, match="unknown feature\\(s\\) Nope; known: PodNetworkAPI"):
        features.resolve(["PodNetworkAPI", "Nope"])
    assert features.resolve(["NPWGBridge", "PodNetworkAPI"]) == ("PodNetworkAPI", "NPWGBridge")
