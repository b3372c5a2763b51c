"""The trust wing's ground: keys, signed statements, where they are kept, and the one decision."""
