"""The catalogue: a static site of a registry's validated images (`ascend-build catalogue`)."""
