"""Deltas between two exports of one model, and a servable SavedModel rebuilt from them.

A run publishes a full export (the base) now and then and, in between, deltas holding only
what changed since the previous publication. :func:`write_delta` compares the tensors of
that publication's variables checkpoint (:func:`export_tensors`, or :func:`chain_tensors`
of a base and its deltas) with a new export's and writes ``OUT_DIR/delta.json`` (how each
checkpoint key changed: :data:`KINDS`), ``tensors.npz`` (the changed data, no pickled
objects) and the new export's ``saved_model.pb`` and ``assets.extra/`` (the serving graph
records the variables' shapes). :func:`write_chain` applies a base's deltas in order and
writes a SavedModel that stock TensorFlow serves. Values are compared bit by bit, so
``-0.0`` differs from ``0.0`` and a NaN equals itself. A hash table (a dynamic table's id
index) is saved as a ``<name>-keys`` and a ``<name>-values`` tensor in arbitrary order;
it is compared as a map. When to publish which is the caller's business.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
from collections.abc import Iterator

import numpy as np
import tensorflow as tf
from tensorflow.python.saved_model import fingerprinting_utils

from recsys_dist import storage_io
from recsys_dist.export.saved_model import EXPORT_INFO, ExportError

#: A delta directory's description and data (besides the serving graph), and its format.
DELTA_FILE, TENSORS_FILE = "delta.json", "tensors.npz"
DELTA_FORMAT = "recsys_dist export delta, version 1"
#: The serving graph, copied into every delta, and an export's variables prefix.
GRAPH_FILE, ASSETS_DIR, VARIABLES = "saved_model.pb", "assets.extra", "variables/variables"
#: The files of an export that serve, and all its files.
SERVING = (GRAPH_FILE, ASSETS_DIR + "/")
EXPORT = (*SERVING, os.path.dirname(VARIABLES) + "/")
#: The checkpoint keys of a hash table's two tensors end in these.
TABLE_KEYS, TABLE_VALUES = "-keys", "-values"
#: The dtype name of string tensors (stored as their bytes and lengths).
STRING = "string"

#: How a tensor changed: ``same`` (nothing stored), ``full`` (stored whole), ``rows`` (a
#: 2-D tensor's changed rows, appended rows and new row count), ``table`` (a hash table's
#: keys inserted or changed, with values, and keys removed), ``new`` and ``removed``.
SAME, FULL, ROWS, TABLE, NEW, REMOVED = "same", "full", "rows", "table", "new", "removed"
KINDS = (SAME, FULL, ROWS, TABLE, NEW, REMOVED)


class DeltaError(ExportError):
    """A delta cannot be written, or does not fit the tensors it is applied to."""


@dataclasses.dataclass(frozen=True)
class TensorChange:
    """How one checkpoint tensor changed: ``how`` (one of :data:`KINDS`), the rows
    ``changed`` (stored; a hash table's keys inserted, changed or removed; a removed
    tensor's old rows; a scalar is one row) and the ``total`` rows (keys) of the new one."""

    how: str
    changed: int
    total: int


@dataclasses.dataclass(frozen=True)
class DeltaSummary:
    """A written delta: its directory, the size of its files and each tensor's change."""

    out_dir: str
    bytes_written: int
    tensors: dict[str, TensorChange]


@dataclasses.dataclass(frozen=True)
class Delta:
    """A delta in memory: ``entries`` (checkpoint key -> the JSON-able description of its
    change, as in ``delta.json``) and ``arrays`` (name -> the data they refer to)."""

    entries: dict[str, dict]
    arrays: dict[str, np.ndarray]

    def summary(self) -> dict[str, TensorChange]:
        return {key: _change(entry) for key, entry in self.entries.items()}

    def save(self, directory: str) -> None:
        """Writes ``tensors.npz`` and then ``delta.json`` into local ``directory``."""
        np.savez(os.path.join(directory, TENSORS_FILE), **self.arrays)
        with open(os.path.join(directory, DELTA_FILE), "w", encoding="utf-8") as handle:
            json.dump({"format": DELTA_FORMAT, "tensors": self.entries}, handle, indent=1)


# ---- tensors -------------------------------------------------------------------------------
def _dtype_name(array: np.ndarray) -> str:
    return STRING if array.dtype.kind in "OSU" else tf.as_dtype(array.dtype).name


def _meta(array: np.ndarray | None, prefix: str = "") -> dict:
    meta = {} if array is None else {"dtype": _dtype_name(array), "shape": list(array.shape)}
    return {prefix + name: value for name, value in meta.items()}


def _rows(shape: list[int]) -> int:
    return int(shape[0]) if shape else 1


def _bits(array: np.ndarray, rows: int) -> np.ndarray:
    """``array`` as ``[rows, bytes]`` of its raw bytes (compared exactly, also NaN)."""
    flat = np.ascontiguousarray(array).reshape(rows, array.size // rows if rows else 0)
    return flat.view(np.uint8)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if _meta(a) != _meta(b) or _dtype_name(a) == STRING:
        return _meta(a) == _meta(b) and a.tolist() == b.tolist()
    return bool(np.array_equal(_bits(a, 1), _bits(b, 1)))


def _pack(name: str, array: np.ndarray) -> dict[str, np.ndarray]:
    """``array`` as plain numeric arrays for ``np.savez``: strings as their bytes and
    lengths, a dtype NumPy does not know (``bfloat16``) as unsigned integers."""
    if _dtype_name(array) == STRING:
        items = [x if isinstance(x, bytes) else str(x).encode() for x in array.ravel()]
        lengths = np.array([len(x) for x in items], np.int64).reshape(array.shape)
        data = np.frombuffer(b"".join(items), np.uint8)
        return {f"{name}.bytes": data, f"{name}.lengths": lengths}
    if array.dtype.isbuiltin != 1:
        array = np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")
    return {name: array}


def _unpack(arrays: dict[str, np.ndarray], name: str, dtype: str) -> np.ndarray:
    if dtype != STRING:
        return arrays[name].view(tf.as_dtype(dtype).as_numpy_dtype)
    lengths = arrays[f"{name}.lengths"]
    data, ends = arrays[f"{name}.bytes"].tobytes(), np.cumsum(lengths.ravel())
    out = np.empty(lengths.size, object)
    out[:] = [data[end - length : end] for end, length in zip(ends, lengths.ravel())]
    return out.reshape(lengths.shape)


def _change(entry: dict) -> TensorChange:
    kind, total = entry["kind"], _rows(entry.get("shape", [0]))
    changed = {SAME: 0, FULL: total, NEW: total, REMOVED: _rows(entry.get("old_shape", [0]))}
    return TensorChange(kind, entry.get("changed", changed.get(kind, 0)), total)


# ---- diff --------------------------------------------------------------------------------
def _is_table(keys: np.ndarray | None, values: np.ndarray | None) -> bool:
    """Whether a ``-keys``/``-values`` pair can be compared as a map."""
    if keys is None or values is None or keys.ndim != 1 or values.shape[:1] != keys.shape:
        return False
    sortable = keys.dtype.kind in "iu" or _dtype_name(keys) == STRING
    return sortable and _dtype_name(values) != STRING and len(np.unique(keys)) == len(keys)


def _table_pairs(old: dict, new: dict) -> dict[str, str]:
    """Keys tensor -> values tensor of every hash table in both ``old`` and ``new``, of the
    same dtypes and value shape on both sides."""
    pairs = {}
    for key in new:
        values = key[: -len(TABLE_KEYS)] + TABLE_VALUES
        if not key.endswith(TABLE_KEYS) or key not in old or values not in old:
            continue
        a, b, c, d = old[key], old[values], new[key], new.get(values)
        if _is_table(a, b) and _is_table(c, d) and _dtype_name(a) == _dtype_name(c):
            if (_dtype_name(b), b.shape[1:]) == (_dtype_name(d), d.shape[1:]):
                pairs[key] = values
    return pairs


def _diff_table(keys: str, values: str, old: dict, new: dict, tag: str) -> tuple[dict, dict]:
    old_keys, old_values, new_keys, new_values = old[keys], old[values], new[keys], new[values]
    order = np.argsort(old_keys, kind="stable")
    sorted_keys = old_keys[order]
    at = np.minimum(np.searchsorted(sorted_keys, new_keys), max(len(sorted_keys) - 1, 0))
    same = sorted_keys[at] == new_keys if len(sorted_keys) else np.zeros(len(new_keys), bool)
    matched = old_values[order[at[same]]]
    same[same] = np.all(_bits(matched, len(matched)) == _bits(new_values[same], len(matched)), 1)
    removed = old_keys[~np.isin(old_keys, new_keys)]
    if not removed.size and same.all():
        return {keys: {"kind": SAME}, values: {"kind": SAME}}, {}
    arrays = _pack(f"{tag}_keys", new_keys[~same]) | _pack(f"{tag}_removed", removed)
    arrays |= _pack(f"{tag}_values", new_values[~same])
    count = int((~same).sum()) + len(removed)
    entries = {
        keys: {"kind": TABLE, "values": values, "data": tag, "changed": count},
        values: {"kind": TABLE, "keys": keys, "changed": count},
    }
    return entries, arrays


def _diff_one(a: np.ndarray | None, b: np.ndarray | None, tag: str) -> tuple[dict, dict]:
    if b is None or (a is not None and _same(a, b)):
        return {"kind": SAME if b is not None else REMOVED}, {}
    if a is None or (a.ndim, b.ndim) != (2, 2) or a.shape[1] != b.shape[1]:
        return {"kind": NEW if a is None else FULL, "data": tag}, _pack(tag, b)
    if _dtype_name(a) != _dtype_name(b) or _dtype_name(a) == STRING:
        return {"kind": FULL, "data": tag}, _pack(tag, b)
    common = min(len(a), len(b))
    differ = np.any(_bits(a[:common], common) != _bits(b[:common], common), axis=1)
    indices, appended = np.flatnonzero(differ).astype(np.int64), b[len(a) :]
    arrays = _pack(f"{tag}_values", b[indices]) | _pack(f"{tag}_appended", appended)
    arrays[f"{tag}_indices"] = indices
    return {"kind": ROWS, "data": tag, "changed": len(indices) + len(appended)}, arrays


def diff_tensors(old: dict[str, np.ndarray], new: dict[str, np.ndarray]) -> Delta:
    """What turns the tensors ``old`` into ``new`` (by checkpoint key), compared exactly.

    A 2-D tensor of the same dtype and row width changes by ``rows``; a hash table's
    ``-keys``/``-values`` pair (unique keys on both sides) by ``table``; any other changed
    tensor is stored ``full``. Each entry also records the tensor's dtype and shape on both
    sides (``old_dtype``, ``old_shape``), which :func:`apply_delta` checks."""
    entries, arrays = {}, {}
    pairs = _table_pairs(old, new)
    for number, key in enumerate(sorted(set(old) | set(new))):
        if key in pairs.values():
            continue
        if key in pairs:
            found, data = _diff_table(key, pairs[key], old, new, f"t{number}")
        else:
            entry, data = _diff_one(old.get(key), new.get(key), f"t{number}")
            found = {key: entry}
        for name, entry in found.items():
            entries[name] = {**entry, **_meta(new.get(name)), **_meta(old.get(name), "old_")}
        arrays.update(data)
    return Delta(entries, arrays)


# ---- apply -------------------------------------------------------------------------------
def _base_tensor(base: dict, key: str, entry: dict, source: str) -> np.ndarray:
    """``base[key]``, checked against the delta's ``old_dtype`` and ``old_shape``."""
    want = f"{entry['old_dtype']} {entry['old_shape']}"
    got = f"{_dtype_name(base[key])} {list(base[key].shape)}" if key in base else "missing"
    if got != want:
        raise DeltaError(
            f"{source}: tensor {key!r} is {got} in the tensors it is applied to, but the "
            f"delta was written from {want}; apply the deltas in order onto the base they "
            "follow"
        )
    return base[key]


def _checked(array: np.ndarray, entry: dict, key: str, source: str) -> np.ndarray:
    if list(array.shape) != entry["shape"]:
        raise DeltaError(f"{source}: {key!r} comes out {list(array.shape)}, not {entry['shape']}")
    return array


def _apply_rows(old: np.ndarray, entry: dict, arrays: dict, key: str, source: str) -> np.ndarray:
    shape, tag, dtype = entry["shape"], entry["data"], entry["dtype"]
    common = min(len(old), shape[0])
    indices = arrays[f"{tag}_indices"]
    if indices.size and (indices.min() < 0 or indices.max() >= common):
        raise DeltaError(
            f"{source}: the rows of {key!r} name row {int(indices.max())} (or a negative one) "
            f"of a tensor of {len(old)} rows, {shape[0]} after it: not one of its first {common}"
        )
    values = _unpack(arrays, f"{tag}_values", dtype)
    appended = _unpack(arrays, f"{tag}_appended", dtype)
    if values.shape != (len(indices), *shape[1:]) or appended.shape[1:] != tuple(shape[1:]):
        raise DeltaError(f"{source}: the stored rows of {key!r} do not fit its shape {shape}")
    out = np.concatenate([old[:common], appended])
    out[indices] = values
    return _checked(out, entry, key, source)


def _apply_table(base: dict, keys: str, entry: dict, delta: Delta, source: str) -> dict:
    values, tag = entry["values"], entry["data"]
    old_keys = _base_tensor(base, keys, entry, source)
    old_values = _base_tensor(base, values, delta.entries[values], source)
    removed = _unpack(delta.arrays, f"{tag}_removed", entry["dtype"])
    absent = removed[~np.isin(removed, old_keys)]
    if absent.size:
        raise DeltaError(
            f"{source}: the hash table {keys!r} removes key(s) {absent[:5].tolist()} that "
            "the tensors it is applied to do not hold"
        )
    put_keys = _unpack(delta.arrays, f"{tag}_keys", entry["dtype"])
    put_values = _unpack(delta.arrays, f"{tag}_values", delta.entries[values]["dtype"])
    kept = ~np.isin(old_keys, removed) & ~np.isin(old_keys, put_keys)
    out = {keys: np.concatenate([old_keys[kept], put_keys])}
    out[values] = np.concatenate([old_values[kept], put_values])
    return {key: _checked(array, delta.entries[key], key, source) for key, array in out.items()}


def _apply_one(base: dict, key: str, entry: dict, delta: Delta, source: str) -> dict:
    kind = entry["kind"]
    if kind not in KINDS:
        raise DeltaError(f"{source}: tensor {key!r} changed by an unknown kind {kind!r}")
    if kind == NEW and key in base:
        raise DeltaError(f"{source}: adds tensor {key!r}, which the tensors it is applied to hold")
    old = None if kind == NEW else _base_tensor(base, key, entry, source)
    if kind in (NEW, FULL):
        stored = _unpack(delta.arrays, entry["data"], entry["dtype"])
        return {key: _checked(stored, entry, key, source)}
    if kind == SAME:
        return {key: old}
    if kind == ROWS:
        return {key: _apply_rows(old, entry, delta.arrays, key, source)}
    if kind == TABLE and "values" in entry:
        return _apply_table(base, key, entry, delta, source)
    if kind == TABLE and delta.entries.get(entry["keys"], {}).get("values") != key:
        raise DeltaError(f"{source}: the hash table values {key!r} have no keys tensor")
    return {}  # removed, or a table's values (they come with its keys)


def apply_delta(base: dict[str, np.ndarray], delta: Delta, source: str = "the delta") -> dict:
    """The tensors ``base`` with ``delta`` applied (``base`` is left as it is).

    Raises:
      DeltaError: ``delta`` was not written from ``base`` (a tensor of another dtype or
        shape or unknown, rows past the old row count, a removed key that is not there).
    """
    unknown = sorted(set(base) - set(delta.entries))
    if unknown:
        raise DeltaError(
            f"{source}: the tensors it is applied to hold {unknown[:5]}, which the delta "
            "does not name: it was written from other tensors"
        )
    out = {}
    try:
        for key, entry in delta.entries.items():
            out.update(_apply_one(base, key, entry, delta, source))
    except KeyError as exc:
        raise DeltaError(f"{source}: {TENSORS_FILE} or {DELTA_FILE} lacks {exc}") from None
    return out


# ---- directories -------------------------------------------------------------------------
@contextlib.contextmanager
def _local_copy(path: str, wanted: tuple[str, ...]) -> Iterator[str]:
    """A local directory holding ``path``'s files whose relative path starts with one of
    ``wanted``: ``path`` itself, or for a remote one a download removed at the end."""
    if not storage_io.is_remote(path):
        yield storage_io.filesystem(path)[1]
        return
    scratch = storage_io.local_scratch("recsys_dist_delta_")
    try:
        storage_io.download_dir(path, scratch, lambda relative: relative.startswith(wanted))
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _require(local: str, path: str, files: list[str], what: str) -> None:
    missing = [f for f in files if not os.path.isfile(os.path.join(local, f))]
    if missing:
        raise DeltaError(f"{path}: not {what} (it has no {', '.join(missing)})")


def _read_variables(local: str, path: str) -> dict[str, np.ndarray]:
    _require(local, path, [GRAPH_FILE, VARIABLES + ".index"], "an export")
    try:
        reader = tf.train.load_checkpoint(os.path.join(local, VARIABLES))
        dtypes = reader.get_variable_to_dtype_map()
        # strings as objects: NumPy's "S" type would drop a value's trailing NULs
        return {
            key: np.array(reader.get_tensor(key), object if dtypes[key] == tf.string else None)
            for key in sorted(dtypes)
        }
    except (tf.errors.OpError, IndexError) as exc:
        raise DeltaError(f"{path}: cannot read its variables: {exc}") from None


def export_tensors(export_dir: str) -> dict[str, np.ndarray]:
    """Every tensor of an export's variables checkpoint, by checkpoint key.

    ``export_dir`` is local, ``s3://`` or ``hdfs://`` (then downloaded). Strings come as
    ``object`` arrays of ``bytes``: the object graph (``_CHECKPOINTABLE_OBJECT_GRAPH``) too.

    Raises:
      DeltaError: ``export_dir`` is not an export, or its variables cannot be read.
    """
    with _local_copy(export_dir, EXPORT) as local:
        return _read_variables(local, export_dir)


def read_delta(delta_dir: str) -> Delta:
    """The delta written to ``delta_dir`` by :func:`write_delta` (local or remote).

    Raises:
      DeltaError: ``delta_dir`` has no ``delta.json`` (not a delta, or its upload was cut)
        or ``tensors.npz``, or they are not of this format.
    """
    with _local_copy(delta_dir, (DELTA_FILE, TENSORS_FILE)) as local:
        _require(local, delta_dir, [DELTA_FILE, TENSORS_FILE], "a delta")
        try:
            with open(os.path.join(local, DELTA_FILE), encoding="utf-8") as handle:
                doc = json.load(handle)
            with np.load(os.path.join(local, TENSORS_FILE), allow_pickle=False) as stored:
                arrays = {name: stored[name] for name in stored.files}
        except (OSError, ValueError) as exc:
            raise DeltaError(f"{delta_dir}: cannot read the delta: {exc}") from None
    found = doc.get("format") if isinstance(doc, dict) else None
    if found != DELTA_FORMAT or not isinstance(doc.get("tensors"), dict):
        raise DeltaError(f"{delta_dir}: {DELTA_FILE} is not a {DELTA_FORMAT!r} (format: {found!r})")
    return Delta(doc["tensors"], arrays)


def _check_out_dir(out_dir: str) -> None:
    if storage_io.exists(out_dir):
        if not storage_io.isdir(out_dir):
            raise DeltaError(f"{out_dir}: exists and is not a directory")
        if storage_io.listdir(out_dir):
            raise DeltaError(f"{out_dir}: exists and is not empty; choose a new directory")


@contextlib.contextmanager
def _writing(out_dir: str, last: str) -> Iterator[str]:
    """A local directory to write ``out_dir``'s files into: a temporary sibling renamed at
    the end, or for a remote ``out_dir`` a staging directory uploaded with ``last`` last."""
    _check_out_dir(out_dir)
    if storage_io.is_remote(out_dir):
        with storage_io.StagedDir(out_dir) as staged:
            yield staged.local
            staged.sync(last=[last])
        return
    local = storage_io.filesystem(out_dir)[1].rstrip("/") or "/"
    tmp = f"{local}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(tmp)
        yield tmp
        if os.path.isdir(local):
            os.rmdir(local)  # empty (checked before); fails if something appeared meanwhile
        os.rename(tmp, local)
    except OSError as exc:
        raise DeltaError(f"{out_dir}: cannot write it: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_serving(source: str, path: str, target: str) -> None:
    """Copies ``saved_model.pb`` and ``assets.extra/`` of local ``source`` (``path``)."""
    _require(source, path, [GRAPH_FILE], "an export or a delta")
    shutil.copyfile(os.path.join(source, GRAPH_FILE), os.path.join(target, GRAPH_FILE))
    if os.path.isdir(os.path.join(source, ASSETS_DIR)):
        shutil.copytree(os.path.join(source, ASSETS_DIR), os.path.join(target, ASSETS_DIR))


def write_delta(old: dict[str, np.ndarray], new_export_dir: str, out_dir: str) -> DeltaSummary:
    """Writes to ``out_dir`` what changed from the tensors ``old`` of the previous
    publication (:func:`export_tensors` of a base, or :func:`chain_tensors` of a base and
    its deltas) to the export ``new_export_dir``, and returns its size and changes.

    ``out_dir`` (local, ``s3://`` or ``hdfs://``) must not exist or be empty. A local one
    is written to a temporary sibling renamed into place, a remote one uploaded with
    ``delta.json`` last.

    Raises:
      DeltaError: ``new_export_dir`` is not an export, or ``out_dir`` is not empty or
        cannot be written.
    """
    with _local_copy(new_export_dir, EXPORT) as local:
        delta = diff_tensors(old, _read_variables(local, new_export_dir))
        with _writing(out_dir, DELTA_FILE) as target:
            _copy_serving(local, new_export_dir, target)
            delta.save(target)
            files = [os.path.join(d, f) for d, _, names in os.walk(target) for f in names]
            size = sum(os.path.getsize(f) for f in files)
    return DeltaSummary(out_dir, size, delta.summary())


def apply_deltas(base_tensors: dict[str, np.ndarray], delta_dir: str) -> dict[str, np.ndarray]:
    """The tensors ``base_tensors`` with the delta in ``delta_dir`` applied (a new dict);
    :class:`DeltaError` if it is not a delta or was not written from these tensors."""
    return apply_delta(base_tensors, read_delta(delta_dir), delta_dir)


def chain_tensors(base_dir: str, delta_dirs: list[str]) -> dict[str, np.ndarray]:
    """The tensors of the export ``base_dir`` with each delta of ``delta_dirs`` applied in
    order: those of the export the last delta was written from."""
    tensors = export_tensors(base_dir)
    for delta_dir in delta_dirs:
        tensors = apply_deltas(tensors, delta_dir)
    return tensors


def write_chain(base_dir: str, delta_dirs: list[str], out_dir: str) -> None:
    """Writes the SavedModel of a base export and its deltas to ``out_dir``.

    Its ``saved_model.pb`` and ``assets.extra/`` are the last delta's (the base's without
    deltas), its variables :func:`chain_tensors` written with TensorFlow's ``SaveV2`` (a
    hash table's keys and values in one order, the object graph as it was), and its
    ``fingerprint.pb`` its own; it serves as the export the last delta was written from.
    Written like :func:`write_delta` (a remote one with ``assets.extra/export.json`` last).

    Raises:
      DeltaError: ``base_dir`` is not an export, a delta directory is not a delta or does
        not follow the one before it, or ``out_dir`` is not empty or cannot be written.
    """
    _check_out_dir(out_dir)
    tensors = chain_tensors(base_dir, delta_dirs)
    names, last = sorted(tensors), delta_dirs[-1] if delta_dirs else base_dir
    with _local_copy(last, SERVING) as local, _writing(out_dir, EXPORT_INFO) as target:
        _copy_serving(local, last, target)
        os.makedirs(os.path.join(target, os.path.dirname(VARIABLES)))
        prefix, slices = os.path.join(target, VARIABLES), [""] * len(names)
        values = [tf.constant(tensors[n]) for n in names]
        try:
            tf.raw_ops.SaveV2(
                prefix=prefix, tensor_names=names, shape_and_slices=slices, tensors=values
            )
        except tf.errors.OpError as exc:
            raise DeltaError(f"{out_dir}: cannot write its variables: {exc.message}") from None
        fingerprinting_utils.write_fingerprint(target)
