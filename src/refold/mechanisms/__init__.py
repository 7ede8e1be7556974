"""Projection rules: each decides how a piece of history is shown, never deletes it."""
