"""The sequence networks of the zoo written in plain PyTorch: the speed peer of
``sequence_speed.py``, which runs this file in an environment with PyTorch
(``make bench-torch`` builds ``.venv-torch``); it needs only numpy and torch.

It trains one pass over the rows of an ``.npz`` that ``sequence_speed.py`` writes and
prints one JSON line: examples/s after the first ``--warmup`` steps, steps, seconds.

The networks are the zoo's (``recsys_dist/models/zoo/din.py``, ``bst.py``), with the same
widths, activations, tables and optimizers (Adagrad with sparse gradients for the tables,
Adam for the rest), one process on ``--threads`` threads:

- ``pooled``: DIN's network with each history mean-pooled over its real positions;
- ``din``: DIN's activation unit (an MLP with Dice over ``[q, k, q - k, q * k]``, and
  with ``--positions`` a learned embedding of each position) on the real positions only,
  weights unnormalised, then the weighted sum;
- ``bst``: one post-norm transformer layer (2 heads, feed-forward 4x with leaky ReLU,
  dropout 0.1) over the candidate and the padded history with learned positions; the
  candidate's output and the mean of the history's outputs.

Each id column of the npz holds table rows (0 is never a real id's row, so it serves as
the padding of the histories); ``tables`` gives each table's size.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn


class Dice(nn.Module):
    """DIN's Dice: ``p = sigmoid(batchnorm(x))``, ``p x + (1 - p) alpha x``."""

    def __init__(self, units: int):
        super().__init__()
        self.norm = nn.BatchNorm1d(units, affine=False, eps=1e-8, momentum=0.01)
        self.alpha = nn.Parameter(torch.zeros(units))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(self.norm(x))
        return p * x + (1 - p) * self.alpha * x


def mlp(width: int, units: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for u in units:
        layers += [nn.Linear(width, u), nn.ReLU()]
        width = u
    return nn.Sequential(*layers)


class SequenceNet(nn.Module):
    """``others`` (one id per row) and one history (a main sequence and its sides, each
    position the concatenation of their embeddings) whose candidate is ``query``."""

    def __init__(
        self, model: str, tables: dict, others: list, history: list, length: int, positions: bool
    ):
        super().__init__()
        self.model, self.others, self.history = model, others, history
        self.tables = nn.ModuleDict(
            {t: nn.Embedding(n, 16, sparse=True, padding_idx=0) for t, n in tables.items()}
        )
        dim = 16 * len(history)
        deep_in = 16 * len(others) + dim * (2 if model == "bst" else 1)
        self.positions = None
        if model == "din":
            width = 5 * dim if positions else 4 * dim
            self.unit = nn.Sequential(
                nn.Linear(width, 80), Dice(80), nn.Linear(80, 40), Dice(40), nn.Linear(40, 1)
            )
            if positions:
                self.positions = nn.Embedding(length, dim)
        if model == "bst":
            self.learned = nn.Parameter(torch.empty(length + 1, dim).uniform_(-0.05, 0.05))
            self.encoder = nn.TransformerEncoderLayer(
                dim, 2, 4 * dim, dropout=0.1, activation=nn.LeakyReLU(0.2), batch_first=True
            )
        self.deep = mlp(deep_in, [256, 128, 64])
        self.head = nn.Linear(64, 1)

    def keys(self, batch: dict, mask=None) -> torch.Tensor:
        """Each position's embeddings (of every sequence of the history), concatenated."""
        return torch.cat(
            [
                self.tables[table](batch[name] if mask is None else batch[name][mask])
                for name, _, table in self.history
            ],
            dim=-1,
        )

    def forward(self, batch: dict) -> torch.Tensor:
        others = [self.tables[t](batch[n]) for n, t in self.others]
        query = torch.cat([self.tables[t](batch[target]) for _, target, t in self.history], -1)
        mask = batch[self.history[0][0]] > 0  # [B, L]
        if self.model == "bst":
            x = torch.cat([query[:, None, :], self.keys(batch)], dim=1) + self.learned
            pad = torch.cat([torch.zeros_like(mask[:, :1]), ~mask], dim=1)
            x = self.encoder(x, src_key_padding_mask=pad)
            real = mask.float()[..., None]
            mean = (x[:, 1:] * real).sum(1) / real.sum(1).clamp(min=1.0)
            pooled = [x[:, 0], mean]
        else:
            real = mask.nonzero()  # (example, position) of each real position
            rows = real[:, 0]
            k = self.keys(batch, mask)  # [R, G], real positions only
            if self.model == "din":
                q = query[rows]
                parts = [q, k, q - k, q * k]
                if self.positions is not None:
                    parts.append(self.positions(real[:, 1]))
                w = self.unit(torch.cat(parts, dim=-1))  # [R, 1]
                k = w * k
            total = torch.zeros_like(query).index_add_(0, rows, k)
            if self.model == "pooled":
                total = total / mask.sum(1, keepdim=True).clamp(min=1).float()
            pooled = [total]
        return self.head(self.deep(torch.cat([*others, *pooled], dim=-1)))[:, 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", required=True, help=".npz that sequence_speed.py wrote")
    parser.add_argument("--model", choices=("pooled", "din", "bst"), required=True)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=50, help="steps left out of the rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--positions", action="store_true", help="din: position embeddings in the unit"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = np.load(args.rows, allow_pickle=False)
    spec = json.loads(str(data["spec"]))
    columns = {n: torch.from_numpy(data[n]) for n in spec["columns"]}
    label = torch.from_numpy(data["label"]).float()
    net = SequenceNet(
        args.model, spec["tables"], spec["others"], spec["history"], spec["length"], args.positions
    )
    sparse = [p for n, p in net.named_parameters() if n.startswith("tables.")]
    dense = [p for n, p in net.named_parameters() if not n.startswith("tables.")]
    optimizers = [
        torch.optim.Adagrad(sparse, lr=0.05, initial_accumulator_value=1e-4),
        torch.optim.Adam(dense, lr=1e-3),
    ]
    loss_fn = nn.BCEWithLogitsLoss()
    order = torch.randperm(len(label), generator=torch.Generator().manual_seed(args.seed))
    steps = len(label) // args.batch_size
    start = None
    for step in range(steps):
        if step == args.warmup:
            start = time.perf_counter()
        take = order[step * args.batch_size : (step + 1) * args.batch_size]
        batch = {n: c[take] for n, c in columns.items()}
        loss = loss_fn(net(batch), label[take])
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in optimizers:
            opt.step()
    seconds = time.perf_counter() - start
    timed = steps - args.warmup
    print(
        json.dumps(
            {
                "ex_per_s": timed * args.batch_size / seconds,
                "steps": steps,
                "seconds": seconds,
                "loss": float(loss),
            }
        )
    )


if __name__ == "__main__":
    main()
