"""The ground every layer stands on: the names on the wire and the views of the objects.

- `constants`: API groups, versions, kinds, plurals, annotation keys, the finalizer,
  condition types and reasons, spelled once for every layer;
- `core`: typed views of Pod, Node, Namespace, `metav1.Condition` and
  `PartialObjectMetadata`; `nad`: the NetworkAttachmentDefinition's;
- `names`: the DNS-1123 and interface-name rules;
- `fielderrors`, `excerpts`, `jsontype`: how an error names a field, quotes a value and
  says a JSON value's type.

It imports nothing else of this project (`.importlinter`), and nothing heavier than
pydantic, so any layer, the CNI agent above all, may use it.
"""

__all__: list[str] = []
