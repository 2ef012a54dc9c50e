"""The records of the KEP-3698 suite, in the order they run. Manifests are in `manifests/`."""

from __future__ import annotations

from conformance.kep.suite import ConformanceTest
from conformance.kep.tests import admission, core, dra, extended, policy, primary, services

ALL: tuple[ConformanceTest, ...] = (*core.TESTS, *admission.TESTS, *extended.TESTS, *policy.TESTS,
                                    *primary.TESTS, *services.TESTS, *dra.TESTS)
BY_NAME: dict[str, ConformanceTest] = {t.name: t for t in ALL}
