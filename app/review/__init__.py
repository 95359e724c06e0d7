"""Judges' review: overrides (suggestion and response, undo), flags, the review queue and judges' agreement."""
