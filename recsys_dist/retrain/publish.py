"""Published models of a daily retraining root, and the atomic way one is published.

Layout (local or ``s3://``)::

    ROOT/runs/<date>/          the day's training run (its model_dir)
    ROOT/published/<date>/     export/ (SavedModel), config.yaml, features.yaml,
                               manifest.json, then _SUCCESS (written last)
    ROOT/CURRENT               the date of the model to serve (written after _SUCCESS)

A published directory without ``_SUCCESS`` is a publication cut short: it is never
used as a parent or served, and publishing that date again replaces it.
"""

from __future__ import annotations

import datetime
import json
import posixpath

import tensorflow as tf

from recsys_dist.errors import RecsysError

SUCCESS = "_SUCCESS"
MANIFEST = "manifest.json"
CURRENT = "CURRENT"


class PublishError(RecsysError):
    """A published model is missing or unreadable."""


def _join(*parts: str) -> str:
    return posixpath.join(*parts)


class Publications:
    """The published models under ``root``."""

    def __init__(self, root: str):
        self.root = root
        self.published = _join(root, "published")

    def run_dir(self, date: datetime.date) -> str:
        return _join(self.root, "runs", date.isoformat())

    def directory(self, date: datetime.date) -> str:
        return _join(self.published, date.isoformat())

    def is_published(self, date: datetime.date) -> bool:
        return tf.io.gfile.exists(_join(self.directory(date), SUCCESS))

    def dates(self) -> list[datetime.date]:
        """Dates with a complete publication, oldest first."""
        try:
            names = tf.io.gfile.listdir(self.published)
        except tf.errors.NotFoundError:
            return []
        found = []
        for name in names:
            name = name.rstrip("/")
            try:
                date = datetime.date.fromisoformat(name)
            except ValueError:
                continue
            if self.is_published(date):
                found.append(date)
        return sorted(found)

    def latest_before(self, date: datetime.date) -> datetime.date | None:
        earlier = [d for d in self.dates() if d < date]
        return earlier[-1] if earlier else None

    def manifest(self, date: datetime.date) -> dict:
        path = _join(self.directory(date), MANIFEST)
        try:
            with tf.io.gfile.GFile(path) as handle:
                return json.load(handle)
        except (tf.errors.OpError, ValueError) as exc:
            raise PublishError(f"{path}: unreadable manifest ({exc})") from None

    def current(self) -> str | None:
        path = _join(self.root, CURRENT)
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as handle:
            return handle.read().strip() or None

    def begin(self, date: datetime.date) -> str:
        """Clears a cut-short publication of ``date``; returns its directory."""
        directory = self.directory(date)
        if tf.io.gfile.exists(directory):
            tf.io.gfile.rmtree(directory)
        tf.io.gfile.makedirs(directory)
        return directory

    def finish(self, date: datetime.date, manifest: dict, files: dict[str, str]) -> None:
        """Writes ``files`` (name -> text), the manifest, ``_SUCCESS`` last, then CURRENT."""
        directory = self.directory(date)
        for name, text in files.items():
            with tf.io.gfile.GFile(_join(directory, name), "w") as handle:
                handle.write(text)
        with tf.io.gfile.GFile(_join(directory, MANIFEST), "w") as handle:
            handle.write(json.dumps(manifest, indent=2))
        with tf.io.gfile.GFile(_join(directory, SUCCESS), "w") as handle:
            handle.write(date.isoformat() + "\n")
        newest = self.dates()[-1]
        if newest == date:  # a backfilled older day never takes CURRENT back
            with tf.io.gfile.GFile(_join(self.root, CURRENT), "w") as handle:
                handle.write(date.isoformat() + "\n")
