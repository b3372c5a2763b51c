"""The node wing: what a cluster node has (host), which validated image fits it (registry,
pull), how to start it (run), the pre-flight checklist (doctor), the error table (explain)
and the run record.

Nothing here imports builder.images: the node reads only what images and registries carry.
"""
