"""ascend-build: a version matrix in, validated Ascend training images out."""

__version__ = "0.1.0"
