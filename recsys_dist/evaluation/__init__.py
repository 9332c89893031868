"""Offline evaluation: exact metrics over collected model outputs and a self-contained report."""
