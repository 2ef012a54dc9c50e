"""Executing delegate plugins, as libcni does for a runtime: one exec (`invoke`), configuration lists
(`conflist`), the containers' records on disk (`cache`, `records`), the delegates of one attachment
(`runner`), the plugins an earlier agent left running (`orphans`), and the node's host paths the
plugins and namespaces are found by (`hostpaths`).

Imports only `shim` (the protocol's error codes and versions)."""
