"""Outputs stage: tables in several formats, charts, the impact report, notification lists."""
