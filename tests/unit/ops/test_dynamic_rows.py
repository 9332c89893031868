"""The row kernels of dynamic tables (recsys_dist/ops/dynamic_rows.cc): ``LiveRows``,
``PackRows`` and its gradient ``UnpackRowGrads`` give what the stock ops give (values and
gradients, checked against numpy and against the stock-op packing an export uses), and
each refusal of a bad input is checked on its message."""

from __future__ import annotations

import types

import numpy as np
import pytest
import tensorflow as tf

from recsys_dist import ops
from recsys_dist.models.dynamic_lookup import packed_rows, packed_rows_stock


def random_rows(rng, sizes, capacity):
    """Each index's rows: distinct rows below ``capacity``, about a third -1."""
    parts = []
    for n in sizes:
        rows = rng.choice(capacity, n, replace=False)
        rows[rng.random(n) < 0.35] = -1
        parts.append(rows)
    return np.concatenate(parts).astype(np.int64)


def expected_pack(embs, owner, rows, sizes):
    starts = np.concatenate([[0], np.cumsum(sizes)])
    pieces = []
    for emb, o in zip(embs, owner):
        index_rows = rows[starts[o] : starts[o + 1]]
        out = np.zeros((len(index_rows), emb.shape[1]), np.float32)
        out[index_rows >= 0] = emb[index_rows[index_rows >= 0]]
        pieces.append(out.reshape(-1))
    return np.concatenate(pieces)


@pytest.mark.parametrize("sizes", [[7, 0, 12], [1], [0, 0], [300, 5]])
def test_packed_rows_match_numpy_and_the_stock_ops_with_their_gradients(sizes):
    rng = np.random.default_rng(len(sizes) + sum(sizes))
    dims = [3, 1, 4, 2, 5][: 2 * len(sizes)]
    owner = [g for g in range(len(sizes)) for _ in range(2)][: len(dims)]
    capacity = 400
    embs = [rng.normal(size=(capacity, d)).astype(np.float32) for d in dims]
    variables = [tf.Variable(e) for e in embs]
    groups = [
        [types.SimpleNamespace(emb=v) for v, o in zip(variables, owner) if o == g]
        for g in range(len(sizes))
    ]
    rows_np = random_rows(rng, sizes, capacity)
    rows, size_t = tf.constant(rows_np), tf.constant(sizes, tf.int32)

    live = ops.load().live_rows(rows, size_t, N=len(sizes))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for g, part in enumerate(live):
        index_rows = rows_np[starts[g] : starts[g + 1]]
        assert part.numpy().tolist() == index_rows[index_rows >= 0].tolist()

    upstream = tf.constant(
        rng.normal(size=sum(s * d for s, d in zip([sizes[o] for o in owner], dims))), tf.float32
    )

    def packed_and_grads(stock: bool):
        with tf.GradientTape() as tape:
            pack = packed_rows_stock if stock else packed_rows
            packed = pack(groups, rows, size_t, None)
            loss = tf.reduce_sum(packed * upstream)
        grads = tape.gradient(loss, variables)
        return packed.numpy(), [tf.convert_to_tensor(g).numpy() for g in grads]

    fused, fused_grads = packed_and_grads(stock=False)
    stock, stock_grads = packed_and_grads(stock=True)
    np.testing.assert_array_equal(fused, expected_pack(embs, owner, rows_np, sizes))
    np.testing.assert_array_equal(fused, stock)
    for a, b in zip(fused_grads, stock_grads):
        np.testing.assert_array_equal(a, b)
    assert any(np.any(g) for g in fused_grads) == bool((rows_np >= 0).any())


def test_the_gradient_runs_in_a_function_and_reaches_only_live_rows():
    emb = tf.Variable(tf.ones([6, 2]))
    groups = [[types.SimpleNamespace(emb=emb)]]

    @tf.function
    def grad(rows):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(packed_rows(groups, rows, tf.size(rows)[None], None))
        return tf.convert_to_tensor(tape.gradient(loss, emb))

    out = grad(tf.constant([4, -1, 1], tf.int64)).numpy()
    assert out[:, 0].tolist() == [0, 1, 0, 0, 1, 0]


def call(name, **kwargs):
    return getattr(ops.load(), name)(**kwargs)


ROWS, SIZES = tf.constant([0, -1, 2], tf.int64), tf.constant([2, 1], tf.int32)
GATHERED = [tf.zeros([1, 2]), tf.zeros([1, 3])]


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        (
            "live_rows",
            dict(rows=ROWS, sizes=tf.constant([2, 2], tf.int32), N=2),
            "sizes add up to 4 but rows holds 3",
        ),
        (
            "live_rows",
            dict(rows=ROWS, sizes=SIZES, N=3),
            r"sizes must hold one count per index \(3\), got shape \[2\]",
        ),
        (
            "live_rows",
            dict(rows=ROWS, sizes=tf.constant([4, -1], tf.int32), N=2),
            "sizes must be >= 0",
        ),
        (
            "live_rows",
            dict(rows=tf.constant([[1]], tf.int64), sizes=tf.constant([1]), N=1),
            "rows must be 1-D",
        ),
        (
            "pack_rows",
            dict(gathered=[tf.zeros([2, 2]), GATHERED[1]], rows=ROWS, sizes=SIZES, owner=[0, 1]),
            r"gathered\[0\] holds 2 vectors but its index has 1 rows >= 0",
        ),
        (
            "pack_rows",
            dict(gathered=[tf.zeros([1]), GATHERED[1]], rows=ROWS, sizes=SIZES, owner=[0, 1]),
            r"gathered\[0\] must be 2-D, got shape \[1\]",
        ),
        (
            "pack_rows",
            dict(gathered=GATHERED, rows=ROWS, sizes=SIZES, owner=[0]),
            r"owner needs one index per table \(2\), got 1",
        ),
        (
            "pack_rows",
            dict(gathered=GATHERED, rows=ROWS, sizes=SIZES, owner=[0, -1]),
            "owner values must be >= 0",
        ),
        (
            "unpack_row_grads",
            dict(grad=tf.zeros([5]), rows=ROWS, sizes=SIZES, T=2, owner=[0, 1], dims=[2, 3]),
            "grad holds 5 values, the tables 7",
        ),
        (
            "unpack_row_grads",
            dict(grad=tf.zeros([7, 1]), rows=ROWS, sizes=SIZES, T=2, owner=[0, 1], dims=[2, 3]),
            "grad must be 1-D",
        ),
        (
            "unpack_row_grads",
            dict(grad=tf.zeros([7]), rows=ROWS, sizes=SIZES, T=2, owner=[0, 1], dims=[2]),
            "dims needs one value per table",
        ),
        (
            "unpack_row_grads",
            dict(grad=tf.zeros([7]), rows=ROWS, sizes=SIZES, T=2, owner=[0, 1], dims=[2, 0]),
            "dims must be >= 1",
        ),
    ],
)
def test_a_bad_input_is_refused_with_its_message(name, kwargs, message):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        call(name, **kwargs)


def test_the_right_inputs_unpack_what_pack_packed():
    packed = call(
        "pack_rows",
        gathered=[tf.constant([[1.0, 2.0]]), tf.constant([[3.0, 4.0, 5.0]])],
        rows=ROWS,
        sizes=SIZES,
        owner=[0, 1],
    )
    assert packed.numpy().tolist() == [1, 2, 0, 0, 3, 4, 5]
    first, second = call(
        "unpack_row_grads", grad=packed, rows=ROWS, sizes=SIZES, T=2, owner=[0, 1], dims=[2, 3]
    )
    assert first.numpy().tolist() == [[1, 2]] and second.numpy().tolist() == [[3, 4, 5]]
