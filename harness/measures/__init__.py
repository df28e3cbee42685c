"""Metric declarations: one formula each, for one record and for whole columns."""
