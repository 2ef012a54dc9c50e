"""Reading manifests: files, directories, stdin, multi-document YAML, Lists, and clear errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podnetwork.cli import manifests

POD = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: ns\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_multi_document_yaml_gives_one_document_per_object_with_its_source(tmp_path):
    path = write(tmp_path, "pods.yaml", POD.format(name="a") + "---\n" + POD.format(name="b"))
    docs = manifests.load([path])
    assert [(d.source, d.ref, d.line) for d in docs] == [
        (f"{path}:doc 1", "ns/a", 1),
        (f"{path}:doc 2", "ns/b", 7),
    ]


def test_empty_documents_between_separators_are_skipped_but_keep_numbering(tmp_path):
    path = write(tmp_path, "p.yaml", "---\n" + POD.format(name="a") + "---\n---\n" + POD.format(name="b"))
    assert [d.source.rsplit(":", 1)[1] for d in manifests.load([path])] == ["doc 1", "doc 3"]


def test_list_kinds_are_flattened_and_items_are_labelled(tmp_path):
    text = "apiVersion: v1\nkind: PodList\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: x}}\n" \
           "- {apiVersion: v1, kind: Pod, metadata: {name: y}}\n"
    path = write(tmp_path, "l.yaml", text)
    docs = manifests.load([path])
    assert [d.name for d in docs] == ["x", "y"]
    assert docs[1].source == f"{path}:doc 1 items[1]"


def test_timestamps_stay_strings_as_in_kubernetes(tmp_path):
    path = write(tmp_path, "p.yaml", POD.format(name="a") + "  creationTimestamp: 2024-01-01T00:00:00Z\n")
    (doc,) = manifests.load([path])
    assert doc.obj["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"


def test_json_file_is_read_as_json(tmp_path):
    path = write(tmp_path, "p.json", '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"}}')
    (doc,) = manifests.load([path])
    assert (doc.kind, doc.name, doc.group, doc.source) == ("Pod", "j", "", f"{path}:doc 1")


def test_stdin_is_read_once_for_dash():
    stdin = io.StringIO(POD.format(name="s"))
    docs = manifests.load(["-", "-"], stdin=stdin)
    assert [(d.source, d.name) for d in docs] == [("<stdin>:doc 1", "s")]


def test_directory_is_read_in_name_order_without_subdirectories_by_default(tmp_path):
    write(tmp_path, "b.yaml", POD.format(name="b"))
    write(tmp_path, "a.yml", POD.format(name="a"))
    write(tmp_path, "notes.txt", "not a manifest")
    write(tmp_path, ".hidden.yaml", "{{{")
    write(tmp_path, "sub/c.yaml", POD.format(name="c"))
    assert [d.name for d in manifests.load([tmp_path])] == ["a", "b"]
    assert [d.name for d in manifests.load([tmp_path], recursive=True)] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.yaml", "kind: Pod\nmetadata: [\n", "bad.yaml:doc 1: invalid YAML at line 3 column 1: "),
        ("bad.json", '{"kind": "Pod",}', "bad.json:doc 1: invalid JSON at line 1 column 16: "),
        ("empty.yaml", "", "empty.yaml: empty file: no Kubernetes objects in it"),
        ("blank.yaml", "  \n\n", "empty.yaml"[:0] + "blank.yaml: empty file"),
        ("comments.yaml", "# nothing\n---\n", "comments.yaml: empty file: only comments or empty documents"),
        ("list.yaml", "- a\n- b\n", "list.yaml:doc 1: a document must be a Kubernetes object (a mapping), not a list"),
        ("scalar.yaml", "hello\n", "scalar.yaml:doc 1: a document must be a Kubernetes object (a mapping), not a string"),
        ("nokind.yaml", "apiVersion: v1\nmetadata: {}\n", "nokind.yaml:doc 1: not a Kubernetes object: `kind` is missing"),
        ("dup.yaml", POD.format(name="a") + "  name: b\n", "dup.yaml:doc 1: invalid YAML at line 6 column 3: mapping key \"name\" already defined; keep one of them"),
        ("items.yaml", "apiVersion: v1\nkind: List\nitems: 3\n", "items.yaml:doc 1: `items` of a List must be a list"),
    ],
)
def test_unusable_input_gives_one_line_naming_file_and_document(tmp_path, name, text, message):
    path = write(tmp_path, name, text)
    loaded = manifests.scan([path])
    assert loaded.documents == []
    (error,) = loaded.errors
    assert str(error).startswith(str(tmp_path / message.split(":")[0]))
    assert message in str(error)
    assert "\n" not in str(error)
    assert not isinstance(error, manifests.ManifestIOError)


def test_problems_in_one_document_do_not_hide_the_others(tmp_path):
    path = write(tmp_path, "mixed.yaml", "- 1\n---\n" + POD.format(name="ok"))
    loaded = manifests.scan([path])
    assert [d.name for d in loaded.documents] == ["ok"]
    assert [e.source for e in loaded.errors] == [f"{path}:doc 1"]


def test_missing_path_and_empty_directory_are_io_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    loaded = manifests.scan([tmp_path / "nope.yaml", tmp_path / "empty"])
    assert [type(e) for e in loaded.errors] == [manifests.ManifestIOError] * 2
    assert str(loaded.errors[0]) == f"{tmp_path / 'nope.yaml'}: no such file or directory"
    assert "no *.yaml, *.yml, *.json files" in str(loaded.errors[1])


def test_load_raises_the_first_problem(tmp_path):
    path = write(tmp_path, "bad.yaml", "a: [\n")
    with pytest.raises(manifests.ManifestError, match=r"bad\.yaml:doc 1: invalid YAML"):
        manifests.load([path])


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gives_documents_or_manifest_errors_never_exceptions(text):
    loaded = manifests.load_text(text, "fuzz.yaml")
    for doc in loaded.documents:
        assert isinstance(doc.obj, dict)
    for error in loaded.errors:
        assert "\n" not in str(error)
