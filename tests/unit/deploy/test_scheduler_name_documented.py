"""The scheduler name pods must set for the extender to filter their nodes, as deploy/scheduler's
kube-scheduler configuration gives it, is said where a user installing from the README and
docs/deploy.md reads (it was only in docs/scheduler-extender.md and a manifest comment)."""

from __future__ import annotations

import yaml

from tests.unit.deploy_support import DEPLOY, ROOT


def test_the_readme_and_the_deploy_doc_say_which_scheduler_name_gets_the_extender() -> None:
    config = yaml.safe_load((DEPLOY / "scheduler" / "kube-scheduler-config.yaml").read_text())
    assert config["extenders"]  # extenders apply to every profile of the configuration
    (profile,) = config["profiles"]
    name = profile["schedulerName"]
    readme = (ROOT / "README.md").read_text().split("## On a real cluster", 1)[1].split("\n## ", 1)[0]
    deploy_doc = (ROOT / "docs" / "deploy.md").read_text().split("\n## The cluster default network", 1)[0]
    for text in (" ".join(readme.split()), " ".join(deploy_doc.split())):
        assert f"schedulerName: {name}" in text
