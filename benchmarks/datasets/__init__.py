"""Converters of public ratings and ad-click datasets into daily Parquet partitions."""
