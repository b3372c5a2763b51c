"""The build wing: matrix -> checks -> render -> stage -> build, smoke, seal, tag, push; ci_matrix; the release watcher.

Nothing here imports builder.node: the two wings meet only through the shared modules
at the top (versions, knowledge, vocabulary, engine, devices) and the image labels.
"""
