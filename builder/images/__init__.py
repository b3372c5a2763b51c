"""The image wing: matrix -> checks -> plan -> lock -> render -> stage -> build, smoke, seal, tag, push; ci_matrix.

Nothing here imports builder.node: the two wings meet only through the shared modules
at the top (versions, knowledge, vocabulary, engine, devices) and the image labels.
The release watchers are a wing of their own (builder/releases).
"""
