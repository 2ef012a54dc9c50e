"""The KEP-3698 scheduler extender (docs/scheduler-extender.md).

Modules, imported as modules: `cache` (the watch-fed `Cache` and its immutable
`Snapshot`), `decision` (`filter_nodes`, the pure filter), `wire` (the extender v1
JSON types), `app` (`create_app`, the FastAPI shell), `feeder` (list+watch into a
cache), `settings`, `command` (`podnetwork scheduler-extender`). Depends only on
the KEP layer (`podnetwork`), never on the NPWG layer (see .importlinter).
"""
