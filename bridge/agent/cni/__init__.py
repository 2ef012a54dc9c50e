"""The delegating plugin's ADD, DEL, CHECK and GC: a request (`request`), a pod's networks (`selection`,
`defaultnet`), the plan (`plan`, pure; `planner`), the attachments (`attachments`), GC (`collector`),
and what ADD and DEL ask of the per-pod features (`features`, protocols the features satisfy).

Imports `pods`, `netns`, `node`, `kube`, `delegates`; never a feature (`policy`, `services`,
`access`): the daemon hands them in."""
