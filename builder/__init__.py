"""ascend-build: a version matrix in, validated Ascend training images out."""

from importlib import metadata

try:  # the installed distribution's version: what a wheel, an sdist and an editable install all declare
    __version__ = metadata.version("ascend-build")
except metadata.PackageNotFoundError:  # imported from a folder no installer has seen
    __version__ = "0+unknown"
