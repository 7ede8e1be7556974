"""Recorded runs of agent harnesses, each format in its own module, read into the chat messages a
``History`` is built from (``refold.loaders`` detects the format and dispatches)."""
