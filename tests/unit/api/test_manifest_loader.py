"""The manifest reader's YAML loading: the same documents and errors from libyaml and
from PyYAML's pure-Python parser, JSON values only, and no input (generated YAML
with aliases, deep nesting, odd scalars, surrogates, binary bytes) that ends in
anything but documents or one clear line per problem."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podnetwork.cli import manifests
from podnetwork.commands import validate
from podnetwork.ground import excerpts
from podnetwork.ground.fielderrors import FieldError, invalid
from tests.unit.files_support import ROOT, bomb, nested

PARSERS = (manifests.YAMLParser.LIBYAML, manifests.YAMLParser.PYTHON)
#: Small bounds, so generated inputs of a few lines reach them.
SMALL = manifests.Limits(max_alias_nodes=40, max_depth=6)


def read(text: str, parser: manifests.YAMLParser, limits: manifests.Limits = manifests.DEFAULT_LIMITS) -> Any:
    """Everything load_text says, comparable across parsers (`repr`: NaN equals NaN)."""
    loaded = manifests.load_text(text, "in.yaml", limits=limits, parser=parser)
    return repr([(d.source, d.line, d.obj) for d in loaded.documents]), [str(e) for e in loaded.errors]


def test_libyaml_is_installed_here() -> None:
    # Otherwise the comparisons below would compare PyYAML with itself.
    assert manifests.LIBYAML_AVAILABLE


# --- both parsers, one result -------------------------------------------------------------------

REPO_YAML = sorted(
    p for d in ("examples", "crds", "deploy", "tests/fixtures") for p in (ROOT / d).rglob("*.yaml")
)


@pytest.mark.parametrize("path", REPO_YAML, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_repository_manifests_read_the_same_with_either_parser(path: Path) -> None:
    text = path.read_text()
    assert read(text, PARSERS[0]) == read(text, PARSERS[1])


CASES = {
    "merge keys": "a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  y: 3\n",
    "merge list": "a: &a {x: 1}\nb: &b {y: 2}\nc: {<<: [*a, *b], z: 3}\n",
    "anchored scalar": "a: &s hello\nb: *s\n",
    "block scalars": "a: |\n  line 1\n  line 2\nb: >-\n  folded\n  text\n",
    "quoted": "a: 'it''s'\nb: \"tab\\there \\u00e9\"\n",
    "yaml 1.1 scalars": "a: [yes, No, on, ~, 0x1F, 017, 0b11, 1_000, '1:30', 1:30, .inf, -.Inf, 1e3, 2024-01-01, =]\n",
    "several documents": "a: 1\n---\n# only a comment\n---\nb: 2\n...\n---\nc: [3]\n",
    "syntax error": "a: [1, 2\nb: 3\n",
    "syntax error in doc 2": "a: 1\n---\nb: {c\n",
    "bad indentation": "a:\n  b: 1\n c: 2\n",
    "duplicate key": "a: 1\nb: 2\na: 3\n",
    "duplicate anchor": "a: &x 1\nb: &x 2\n",
    "undefined alias": "a: *nowhere\n",
    "recursive alias": "a: &r [1, *r]\n",
    "recursive merge": "a: &m {<<: *m}\n",
    "merge of a scalar": "a: &s 1\nb: {<<: *s}\n",
    "complex key": "? [a, b]\n: 1\n",
    "unsupported tags": "a: !!binary aGk=\nb: !!set {x}\nc: !thing x\n",
    "bad explicit scalars": "a: !!int nope\n",
    "bad bool": "a: !!bool maybe\n",
    "bad float": "a: !!float x\n",
    "int beyond 64 bits": "a: 18446744073709551616\n",
    "int at 64 bits": "a: 18446744073709551615\nb: -9223372036854775808\n",
    "huge int": "a: " + "9" * 5000 + "\n",
    "huge hex": "a: 0x" + "f" * 5000 + "\n",
    "control character": "a: \x07\n",
    "lone surrogate": "a: \ud800\n",
    "empty": "",
    "deep": nested(10),
    "deep block": "- " * 10 + "x\n",
    "deep through alias": "a: &d [[[[1]]]]\nb: [[[*d]]]\n",
    "alias budget": "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b]\n",
    "alias budget across documents": "a: &a [1, 2, 3, 4, 5, 6, 7, 8]\nb: [*a, *a, *a]\n---\na: &a [1, 2, 3]\nb: [*a, *a]\n",
}


@pytest.mark.parametrize("text", list(CASES.values()), ids=list(CASES))
def test_either_parser_gives_the_same_documents_and_errors(text: str) -> None:
    assert read(text, PARSERS[0], SMALL) == read(text, PARSERS[1], SMALL)


ANCHORS = ("a", "b", "c")
SCALARS = st.sampled_from([
    "x", "'quoted'", '"dq \\u00e9"', "1", "-7", "0x1F", "017", "0b101", "1_000", "1:30:00", "3.5", "1e3",
    ".inf", "-.nan", "~", "null", "", "true", "no", "On", "2024-01-01T00:00:00Z", "=", "<<", "!!str 12",
    "!!int 12", "!!float 1", "!!int nope", "!!binary aGk=", "!!timestamp 2024-01-01", "!custom x",
    "99999999999999999999999", "'a: b'", "?x", "-y", "!!null ~", "!!str ''", "! 12",
])
KEYS = st.sampled_from(["a", "b", "'a'", "1", "<<", "~", "[x]", "? z", "true", "3.0", "!!int 7"])


def _collections(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    flow = st.one_of(
        st.lists(children, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(KEYS, children), max_size=4).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        ),
    )
    return flow | st.tuples(st.sampled_from(ANCHORS), flow).map(lambda t: f"&{t[0]} {t[1]}")


VALUES = st.recursive(
    SCALARS
    | st.sampled_from(ANCHORS).map(lambda a: f"*{a}")
    | st.tuples(st.sampled_from(ANCHORS), SCALARS).map(lambda t: f"&{t[0]} {t[1]}"),
    _collections,
    max_leaves=25,
)
BLOCK_DOCUMENT = st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=5).map(
    lambda kv: "".join(f"{k}: {v}\n" for k, v in kv)
)
BLOCK_NESTING = st.integers(1, 10).map(lambda n: "".join(f"{'  ' * i}k{i}:\n" for i in range(n)) + "  " * n + "v\n")
STREAMS = st.lists(
    BLOCK_DOCUMENT | VALUES.map(lambda v: v + "\n") | st.integers(1, 10).map(nested) | BLOCK_NESTING,
    min_size=1,
    max_size=3,
).map("---\n".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STREAMS)
def test_generated_yaml_reads_the_same_with_either_parser(text: str) -> None:
    assert read(text, PARSERS[0], SMALL) == read(text, PARSERS[1], SMALL)


@pytest.mark.parametrize(
    ("text", "libyaml_reads"),
    [
        pytest.param("apiVersion: v1\t\nkind: X\n", [{"apiVersion": "v1", "kind": "X"}], id="tab after a value"),
        pytest.param("kind: |#\n  x\napiVersion: v1\n", [{"kind": "x\n", "apiVersion": "v1"}], id="comment glued to |"),
        pytest.param(
            "apiVersion: v1\nkind: X\ndata: {a: !!null, b: x}\n",
            [{"apiVersion": "v1", "kind": "X", "data": {"a": None, "b": "x"}}],
            id="a tag glued to a comma in a flow collection",
        ),
    ],
)
def test_the_only_differences_are_where_pyyaml_is_stricter_than_libyaml_and_kubernetes(
    text: str, libyaml_reads: list[dict[str, str]]
) -> None:
    # docs/api.md lists these: without libyaml they are refused.
    fast = manifests.load_text(text, "in.yaml", parser=manifests.YAMLParser.LIBYAML)
    slow = manifests.load_text(text, "in.yaml", parser=manifests.YAMLParser.PYTHON)
    assert [d.obj for d in fast.documents] == libyaml_reads
    assert fast.errors == []
    assert [d.obj for d in slow.documents] != libyaml_reads


# --- what a document may hold -------------------------------------------------------------------


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: !!binary aGk=\n", "in.yaml:doc 1: line 1 column 4: the tag !!binary is not supported"),
        ("a: !!timestamp 2024-01-01\n", "in.yaml:doc 1: line 1 column 4: the tag !!timestamp is not supported"),
        ("a: !!python/object:os.system x\n", "the tag !!python/object:os.system is not supported"),
        ("a: !!int nope\n", 'in.yaml:doc 1: line 1 column 4: "nope" is not an integer'),
        ("a: !!bool maybe\n", 'line 1 column 4: "maybe" is not a boolean; write true or false'),
        ("a: 18446744073709551616\n", "line 1 column 4: the integer 18446744073709551616 does not fit in 64 bits; quote it"),
        ("a: 1:" + "1:" * 300 + "1\n", "does not fit in 64 bits"),
        ("a: " + "9" * 5000 + "\n", "characters, cut) does not fit in 64 bits"),
        ("a: &r [*r]\n", "line 1 column 8: alias *r is inside the node of its own anchor &r"),
        ("a: &x 1\nb: &x 2\n", "line 2 column 4: anchor &x is defined again (first at line 1)"),
        ("a: *" + "n" * 1000 + "\n", "alias *" + "n" * 200 + "... (1000 characters, cut) names no anchor"),
        ("? " + "k" * 5000 + "\n: 1\n? " + "k" * 5000 + "\n: 2\n", 'mapping key "' + "k" * 200 + '"... (5000 characters, cut) already'),
    ],
)
def test_values_kubernetes_has_no_type_for_are_refused_at_their_line(
    parser: manifests.YAMLParser, text: str, message: str
) -> None:
    loaded = manifests.load_text(text, "in.yaml", parser=parser)
    (error,) = loaded.errors
    assert message in str(error)
    assert len(str(error)) < 700


@pytest.mark.parametrize("parser", PARSERS)
def test_yaml_1_1_scalars_read_as_kubernetes_reads_them(parser: manifests.YAMLParser) -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\n"
        "data: {t: 2024-01-01T00:00:00Z, e: =, m: <<, h: 0x1F, o: 017, s: '1:30', x: 1:30, n: ~, b: on}\n"
    )
    (doc,) = manifests.load_text(text, "in.yaml", parser=parser).documents
    assert doc.obj["data"] == {
        "t": "2024-01-01T00:00:00Z", "e": "=", "m": "<<", "h": 31, "o": 15, "s": "1:30", "x": 90, "n": None, "b": True,
    }


def test_a_bomb_in_json_cannot_exist_but_deep_json_is_refused() -> None:
    loaded = manifests.load_text('{"a": ' + nested(101) + "}", "in.json", json_only=True)
    assert [str(e) for e in loaded.errors] == [
        "in.json:doc 1: nested more than 100 levels deep; no Kubernetes object is this deep: check the brackets"
    ]
    loaded = manifests.load_text('{"a": 1' + "0" * 30 + "}", "in.json", json_only=True)
    assert "does not fit in 64 bits" in str(loaded.errors[0])


def test_the_alias_bound_counts_what_aliases_add_not_what_is_written() -> None:
    # A large document without aliases is not an alias bomb.
    big = "apiVersion: v1\nkind: ConfigMap\ndata:\n" + "".join(f"  k{i}: [{i}, {i}]\n" for i in range(20_000))
    assert manifests.load_text(big, "in.yaml").errors == []
    text = "apiVersion: v1\nkind: ConfigMap\ndata:\n  l:\n" + bomb(levels=5, indent=4)
    (error,) = manifests.load_text(text, "in.yaml").errors
    assert "expand the input to more than 10000 nodes" in str(error)
    assert manifests.load_text(text, "in.yaml", limits=manifests.Limits(max_alias_nodes=10**6)).errors == []


# --- fuzz: documents or clear errors, never an exception ----------------------------------------

FRAGMENTS = st.sampled_from([
    "a", ":", ": ", "- ", "\n", "  ", "\t", "[", "]", "{", "}", ",", "&a ", "*a", "&b ", "*b", "<<: ", "!!int ",
    "!!binary ", "!!python/object ", "'", '"', "#", "---\n", "...\n", "? ", "|", ">", "0x1F", "1:30", ".nan", "~",
    "9" * 30, "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "!x ", "\\", "\ufeff", "\ud800", "\udfff", "\x00", "\x85",
    "\u2028", "\U0001f600", "\r\n", "\r", "apiVersion: v1\nkind: X\n", "[" * 8, "]" * 8,
])
TEXTS = st.one_of(
    st.lists(FRAGMENTS, max_size=40).map("".join),
    st.text(max_size=200),
    STREAMS,
)
JSON_TYPES = (str, int, float, bool, type(None))


def _assert_json_values(value: Any, depth: int = 0) -> None:
    assert depth <= manifests.DEFAULT_LIMITS.max_depth
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, JSON_TYPES)
            _assert_json_values(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _assert_json_values(item, depth + 1)
    else:
        assert isinstance(value, JSON_TYPES), type(value)
        if isinstance(value, int) and not isinstance(value, bool):
            assert -(2**63) <= value < 2**64


def _assert_clear(loaded: manifests.Loaded, label: str) -> None:
    for doc in loaded.documents:
        assert isinstance(doc.obj, dict)
        _assert_json_values(doc.obj)
    for error in loaded.errors:
        text = str(error)
        assert text.startswith(label)
        assert "\n" not in text
        assert len(text) <= len(label) + excerpts.LINE_LIMIT + 100


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS, st.sampled_from(PARSERS), st.booleans())
def test_any_text_gives_documents_or_one_line_errors(text: str, parser: manifests.YAMLParser, small: bool) -> None:
    loaded = manifests.load_text(text, "fuzz.yaml", parser=parser, limits=SMALL if small else manifests.DEFAULT_LIMITS)
    _assert_clear(loaded, "fuzz.yaml")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300) | TEXTS.map(lambda t: t.encode("utf-8", "surrogatepass")), st.sampled_from([".yaml", ".json"]))
def test_any_bytes_in_a_file_give_documents_or_one_line_errors(tmp_path: Path, data: bytes, suffix: str) -> None:
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(data)
    _assert_clear(manifests.scan([path]), str(path))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS | st.tuples(VALUES, st.sampled_from(["provider", "parametersRefs", "conditions"])).map(
    lambda t: "apiVersion: multinetwork.x-k8s.io/v1alpha1\nkind: PodNetwork\nmetadata: {name: x}\n"
    f"spec: {{{t[1]}: {t[0]}}}\nstatus: {{conditions: {t[0]}}}\n"
))
def test_validate_reports_any_text_as_findings_never_as_an_exception(text: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = validate.check(["-"], stdin=io.StringIO(text), out=out, err=err)
    assert code in (0, 1, 2)
    for line in out.getvalue().splitlines():
        assert len(line) < 2 * excerpts.LINE_LIMIT


# --- values in messages are cut -----------------------------------------------------------------


def test_cut_keeps_short_text_and_says_how_long_a_cut_one_was() -> None:
    assert excerpts.cut("short") == "short"
    assert excerpts.cut("x" * 500) == "x" * 200 + "... (500 characters, cut)"


def test_value_renders_only_the_start_of_a_huge_structure() -> None:
    # 9**9 strings behind 9 shared lists: rendering it whole would take gigabytes.
    level: Any = ["lol"] * 9
    for _ in range(8):
        level = [level] * 9
    shown = excerpts.value(level)
    assert shown.startswith('[[[[[[[[["lol", "lol"')
    assert shown.endswith("... (cut)")
    assert len(shown) < excerpts.LIMIT + 20


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("net1", '"net1"'),
        (True, "true"),
        ({"b": 1, "a": [None]}, '{"a": [null], "b": 1}'),
        (b"\x00", "b'\\x00'"),
        ({1, 2}, "{1, 2}"),
        (10**5000, "<int too large to print>"),
    ],
    ids=["str", "bool", "dict", "bytes", "set", "huge int"],
)
def test_value_shows_json_and_falls_back_to_a_bounded_repr(value: Any, shown: str) -> None:
    assert excerpts.value(value) == shown


def test_field_errors_cut_long_values_paths_and_details() -> None:
    level: Any = ["lol"] * 9
    for _ in range(5):
        level = [level] * 9  # 59049 strings: 400 KB of JSON
    error = invalid("spec.provider", level, "must be a string")
    assert str(error).startswith('spec.provider: Invalid value: [[[[[["lol"')
    assert len(str(error)) < 300
    long_path = FieldError("spec." + "k" * 5000, invalid("x", 1, "").type, "v", "d" * 5000)
    assert len(str(long_path)) < 1500
    assert len(long_path.to_status_cause()["field"]) < 300


def test_the_networks_annotation_is_quoted_cut_in_its_errors() -> None:
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {
            "multinetwork.x-k8s.io/networks": "{" + "x" * 100_000,
        }},
    }
    from podnetwork.kep import validation

    (error,) = validation.validate_pod(pod)
    assert "(100001 characters, cut)" in str(error)
    assert len(str(error)) < 400
    json.dumps(error.to_status_cause())
    assert yaml.safe_dump(error.to_status_cause())
