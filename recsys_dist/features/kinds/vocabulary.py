"""Vocabulary files of id features (``vocabulary:``): loaded and checked with the config,
looked up in-graph by the transform.

An id in the file reads its position (its line among the non-empty ones); any other id
one of ``oov_buckets`` rows after them, by its hash.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from recsys_dist import hashing
from recsys_dist.lazy import numpy as np
from recsys_dist.lazy import tensorflow as tf
from recsys_dist.yaml_loader import LocatedYaml


def load_vocabulary(doc: LocatedYaml, path: str, file: str, dtype: str) -> list:
    """The ids of a vocabulary file (relative to the feature config), checked."""
    full = file if os.path.isabs(file) else os.path.join(os.path.dirname(doc.file), file)
    try:
        with open(full, encoding="utf-8") as handle:
            entries = [line.rstrip("\n") for line in handle if line.strip()]
    except OSError as exc:
        raise doc.error(path, f"cannot read vocabulary file {full!r}: {exc.strerror}") from None
    if not entries:
        raise doc.error(path, f"vocabulary file {full!r} is empty; expected one id per line")
    if dtype == "int64":
        try:
            entries = [int(e) for e in entries]
        except ValueError as exc:
            raise doc.error(
                path,
                f"vocabulary file {full!r} has a non-integer id ({exc}); "
                "dtype int64 needs one integer per line",
            ) from None
    if len(set(entries)) != len(entries):
        raise doc.error(path, f"vocabulary file {full!r} has duplicate ids")
    return entries


def check_vocabulary(doc: LocatedYaml, path: str, feature: Any, dtype: str) -> list | None:
    """A feature's ``vocabulary`` (ids of ``dtype``) or ``hash_buckets``, not both;
    returns the loaded vocabulary, if any."""
    if feature.vocabulary is not None and feature.hash_buckets is not None:
        raise doc.error(path, "set either 'vocabulary' or 'hash_buckets', not both")
    if feature.vocabulary is not None:
        return load_vocabulary(doc, path + ".vocabulary", feature.vocabulary, dtype)
    return None


def vocabulary_rows(vocabularies: Mapping[str, list], feature: Any) -> int:
    """The rows of a feature's vocabulary and its oov buckets."""
    return len(vocabularies[feature.name]) + feature.oov_buckets


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """A vocabulary as sorted int64 keys (ids, or fingerprints of strings) + positions."""

    keys: np.ndarray
    positions: np.ndarray
    oov_buckets: int
    strings: bool

    @classmethod
    def build(cls, entries: list, oov_buckets: int, strings: bool) -> Vocabulary:
        """Builds the lookup eagerly (outside any traced graph)."""
        if strings:
            keys = tf.strings.to_hash_bucket_fast(
                tf.constant(entries, tf.string), 2**63 - 1
            ).numpy()
            if len(np.unique(keys)) != len(keys):
                raise ValueError("two vocabulary strings share a 63-bit fingerprint")
        else:
            keys = np.asarray(entries, np.int64)
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], order.astype(np.int64), oov_buckets, strings)

    def lookup(self, values: tf.Tensor) -> tf.Tensor:
        """Rows for ``values`` (1-D): position in the file, or size + hash % oov_buckets."""
        if self.strings:
            hashed = hashing.hash_string(values)
            keys_in = tf.bitcast(hashed, tf.int64)
        else:
            keys_in = tf.cast(values, tf.int64)
            hashed = hashing.hash_int64(keys_in)
        keys = tf.constant(self.keys)
        index = tf.minimum(tf.searchsorted(keys, keys_in), len(self.keys) - 1)
        found = tf.equal(tf.gather(keys, index), keys_in)
        oov = len(self.keys) + hashing.to_bucket(hashed, self.oov_buckets)
        return tf.where(found, tf.gather(tf.constant(self.positions), index), oov)
