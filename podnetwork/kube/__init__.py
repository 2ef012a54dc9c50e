"""How the operators meet the Kubernetes API and the API server meets them.

`certificates`: the webhooks' serving certificate. `webhooks`: HTTPS serving of an
admission app on a socket bound in advance. `operatorshell`: what the command
shells of `podnetwork controller` and `podnetwork bridge` share: the --webhook-*
flags and their checks, and running kopf beside the servers until a signal.
"""
