"""Tests of the pure context engine (SPEC C0-C10), written against the SPEC as an independent check."""
