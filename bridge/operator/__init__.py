"""The bridge operator: ParamsReady for NAD-backed PodNetworks, NPWG selections on pods,
pod IPs per PodNetwork, and its pod admission webhook.

- `pods`: what the bridge writes on a pod (pure); `admission`: the pod webhook;
- `controller`: the kopf handlers; `command`: `podnetwork bridge`.
"""
