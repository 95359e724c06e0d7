"""Test collections: import, export and the read side that feeds the evaluation core."""
