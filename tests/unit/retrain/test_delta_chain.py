"""The publications of a follow root, locally and on moto's S3 server: numbered versions
complete only with ``_SUCCESS``, ``LATEST`` after it, a version cut short replaced, files
checked against their manifest, and every broken chain refused by name. The deltas
themselves (``export/delta.py``) are built from real exports in
``tests/unit/export/test_delta.py`` and ``tests/cluster/test_follow.py``."""

from __future__ import annotations

import json
import pathlib

import pytest

from recsys_dist import storage_io
from recsys_dist.retrain.delta_chain import Chain, ChainError, checked_copy, export_chain


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "root")
    server = request.getfixturevalue("s3_server")
    return f"s3://{server['bucket']}/chain/{request.node.name}"


def fake_export(directory: pathlib.Path, text: str) -> str:
    (directory / "variables").mkdir(parents=True)
    (directory / "saved_model.pb").write_text(text)
    (directory / "variables" / "variables.index").write_text(text * 2)
    return str(directory)


def publish_base(chain: Chain, tmp_path: pathlib.Path, name: str, partitions: list[str]) -> dict:
    export = fake_export(tmp_path / name, name)
    return chain.publish(
        export, None, {"partitions": partitions, "through": partitions[-1], "checkpoint": name}
    )


def test_bases_are_numbered_complete_and_latest(root, tmp_path):
    chain = Chain(f"{root}/published")
    first = publish_base(chain, tmp_path, "a", ["h0"])
    assert (first["version"], first["kind"], first["base"], first["parent"]) == (1, "base", 1, None)
    assert set(first["files"]) == {"saved_model.pb", "variables/variables.index"}
    assert first["bytes"] == first["full_bytes"] == 3
    # A version cut short (no _SUCCESS) is not read, and the next publication replaces it.
    storage_io.write_text(f"{root}/published/000002/model/saved_model.pb", "half")
    assert [m["version"] for m in chain.manifests()] == [1]
    second = publish_base(chain, tmp_path, "bb", ["h1", "h2"])
    assert second["version"] == 2 and second["parent"] == 1
    assert chain.covered() == {"h0", "h1", "h2"}
    assert storage_io.read_text(f"{root}/published/LATEST").strip() == "000002"
    assert storage_io.read_text(f"{root}/published/000002/model/saved_model.pb") == "bb"
    local = checked_copy(chain.path(2), second, str(tmp_path / "scratch"))
    assert pathlib.Path(local, "saved_model.pb").read_text() == "bb"


def test_a_changed_file_is_named(root, tmp_path):
    chain = Chain(f"{root}/published")
    manifest = publish_base(chain, tmp_path, "a", ["h0"])
    storage_io.write_text(f"{root}/published/000001/model/variables/variables.index", "zz")
    with pytest.raises(ChainError) as caught:
        checked_copy(chain.path(1), manifest, str(tmp_path / "scratch"))
    assert "000001/model: its files do not match manifest.json (variables/variables.index)" in (
        str(caught.value)
    )


def write_version(root: str, version: int, kind: str, base: int, parent: int | None) -> str:
    directory = f"{root}/published/{version:06d}"
    manifest = {
        "version": version,
        "kind": kind,
        "base": base,
        "parent": parent,
        "partitions": [f"h{version}"],
        "files": {},
    }
    storage_io.write_text(f"{directory}/manifest.json", json.dumps(manifest))
    storage_io.write_text(f"{directory}/_SUCCESS", "")
    return directory


def test_broken_chains_are_refused_by_name(tmp_path):
    root = str(tmp_path / "root")
    chain = Chain(f"{root}/published")
    write_version(root, 1, "delta", 1, None)
    with pytest.raises(ChainError, match="published: holds no complete base publication"):
        chain.links(chain.manifests())
    write_version(root, 2, "base", 2, 1)
    write_version(root, 3, "delta", 2, 2)
    write_version(root, 5, "delta", 2, 4)
    with pytest.raises(ChainError) as caught:
        chain.links(chain.manifests())
    assert "000005: its parent is 000004, not 000003; the chain is broken" in str(caught.value)
    out = str(tmp_path / "out")
    published = f"{root}/published"
    with pytest.raises(ChainError, match="000001: a delta, not a base; --base names a base"):
        export_chain(f"{published}/000001", [], out)
    with pytest.raises(ChainError) as caught:
        export_chain(f"{published}/000002", [f"{published}/000005"], out)
    assert "000005: version 000005 does not follow version 000002 (its parent is 000004)" in str(
        caught.value
    )
    storage_io.write_text(f"{published}/000006/manifest.json", "{}")
    with pytest.raises(ChainError, match="000006: not a complete publication .no _SUCCESS."):
        export_chain(f"{published}/000002", [f"{published}/000006"], out)
    with pytest.raises(ChainError, match="000002/model: missing; .* is not a whole publication"):
        export_chain(f"{published}/000002", [f"{published}/000003"], out)


def test_newest_chain_is_the_last_base_and_the_deltas_after_it(tmp_path):
    from recsys_dist.retrain.delta_chain import newest_chain

    root = str(tmp_path / "root")
    for version, kind, base, parent in [
        (1, "base", 1, None),
        (2, "delta", 1, 1),
        (3, "base", 3, 2),
        (4, "delta", 3, 3),
        (5, "delta", 3, 4),
    ]:
        write_version(root, version, kind, base, parent)
    storage_io.write_text(f"{root}/published/000006/manifest.json", "{}")  # cut short
    base, deltas = newest_chain(f"{root}/published")
    assert base == f"{root}/published/000003"
    assert deltas == [f"{root}/published/000004", f"{root}/published/000005"]
