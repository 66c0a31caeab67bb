"""Helpers shared by several test folders: evidence fixtures, model specs, the accuracy data."""
