"""Every relative link between the Markdown files of the repository resolves, #anchors included.

A link is `[text](target)` outside code; its target is a path relative to the file (or
`#anchor` in the same file). The path must exist in the repository, and an anchor must be the
slug of a heading of the Markdown file it points at, made as GitHub makes it: the heading's
text without its Markdown, lower-cased, every character that is not a letter, a digit, a space,
`-` or `_` dropped, spaces turned into `-`, and `-1`, `-2`, ... appended to a repeated slug.
Links to other sites (`https:`, `mailto:`) are not followed: the tests run offline.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) or ![alt](target); the text may hold `code` and one level of brackets.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]+(?:\([^()\s]*\)[^()\s>]*)*)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def markdown_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")
    return sorted(ROOT / name for name in listed if name and (ROOT / name).is_file())


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if opened:
            fence = None if fence == opened.group(1) else fence or opened.group(1)
            continue
        if fence is None:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML goes
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_ marks, not snake_case
    text = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text(encoding="utf-8")
    # Fenced blocks become empty lines, so that a link's text may span lines and still be
    # numbered; code spans are masked, since `[a](b)` in code is no link.
    kept = dict(prose_lines(text))
    prose = "\n".join(kept.get(n, "") for n in range(1, len(text.splitlines()) + 1))
    prose = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", "x", m.group(0)), prose)
    problems: list[str] = []
    for match in LINK.finditer(prose):
        target = match.group(1)
        if EXTERNAL.match(target):
            continue
        number = prose.count("\n", 0, match.start(1)) + 1
        where = f"{path.relative_to(root)}:{number}: ({target})"
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.is_relative_to(root):
            problems.append(f"{where}: outside the repository, so no link on GitHub")
        elif not linked.exists():
            problems.append(f"{where}: {linked.relative_to(root)} does not exist")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: no heading of {linked.relative_to(root)} has the anchor #{anchor}")
    return problems


def test_github_anchors_are_made_from_headings_as_github_makes_them() -> None:
    assert slug("Webhook certificates") == "webhook-certificates"
    assert slug("Permission to use a PodNetwork (KEP Phase II requirement 16)") == (
        "permission-to-use-a-podnetwork-kep-phase-ii-requirement-16"
    )
    assert slug("`podnetwork validate`") == "podnetwork-validate"
    assert slug("The shim: compiled, or Python") == "the-shim-compiled-or-python"
    assert slug("KEP -> NPWG, and back") == "kep---npwg-and-back"
    assert slug("What `--webhook` does (NPWG 4.1)") == "what---webhook-does-npwg-41"
    assert slug("A [link](x.md) in a heading") == "a-link-in-a-heading"
    assert slug("snake_case _stays_") == "snake_case-stays"


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    # The checker on a repository of the test's own: a missing file, a missing anchor and a path
    # out of the repository are found; a present anchor (also a repeated heading's, -1) and links
    # in code are not.
    root = tmp_path.resolve()
    (root / "docs").mkdir()
    (root / "docs" / "deploy.md").write_text("# Deploy\n\n## Webhook certificates\n")
    page = root / "docs" / "page.md"
    page.write_text(
        "[a](deploy.md#no-such-heading) [b](nope.md) `[c](nope.md)` [d](deploy.md#webhook-certificates)\n"
        "```sh\n[e](nope.md)\n```\n"
        "# T\n# T\n[f](#t-1) [g](#t-2) [h](../../x.md) [i](https://example.com/#x)\n"
        "[a link over\ntwo lines](deploy.md#deploy) [and a broken\none](#nope)\n"
    )
    assert broken_links(page, root) == [
        "docs/page.md:1: (deploy.md#no-such-heading): no heading of docs/deploy.md has the anchor #no-such-heading",
        "docs/page.md:1: (nope.md): docs/nope.md does not exist",
        "docs/page.md:7: (#t-2): no heading of docs/page.md has the anchor #t-2",
        "docs/page.md:7: (../../x.md): outside the repository, so no link on GitHub",
        "docs/page.md:10: (#nope): no heading of docs/page.md has the anchor #nope",
    ]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert broken_links(path) == []
