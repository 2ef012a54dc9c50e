"""The KEP-3698 conformance suite: records gated by features, run against any cluster through the
Kubernetes API only, and the versioned ConformanceReport they produce (docs/conformance.md).

It imports none of this project's KEP layer (`podnetwork.kep`), only how to reach Kubernetes
(`podnetwork.kube`), the API's names (`podnetwork.ground`) and the command layer's output writer
(`podnetwork.cli.outputs`): `.importlinter` holds that as a contract.
"""

#: The suite's version, in every report. Bumped when a test is added, removed or changes its checks.
SUITE_VERSION = "0.1.3"
