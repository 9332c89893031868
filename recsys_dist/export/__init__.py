"""Exporting trained models for serving (see :mod:`recsys_dist.export.saved_model`)."""

from recsys_dist.export.saved_model import ExportError, ExportResult, export_model

__all__ = ["ExportError", "ExportResult", "export_model"]
