"""Whether this process can reach a cluster, checked before an operator starts.

kopf retries a failing login every minute with a traceback and never says how
to fix it; the commands call `login_problem` first and exit with a clear line.
"""

from __future__ import annotations


def login_problem(kubeconfig: str | None, context: str | None = None) -> str | None:
    """Why the cluster cannot be reached with these credentials, or None.

    Without --kubeconfig/--context the in-cluster service account comes first,
    then `$KUBECONFIG` / `~/.kube/config`, as the operators' login does.
    """
    from kubernetes import client, config

    if not kubeconfig and not context:
        try:
            config.load_incluster_config(client_configuration=client.Configuration())
            return None
        except config.ConfigException:
            pass
    try:
        config.load_kube_config(config_file=kubeconfig, context=context,
                                client_configuration=client.Configuration())
    except (config.ConfigException, OSError) as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "no in-cluster account; kubeconfig"
        return f"{where}: {exc}"
    return None
