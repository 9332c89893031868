"""The model zoo: embedding lookups, reusable blocks and the registered models.

- :mod:`recsys_dist.models.embedding`: :class:`FeatureEmbeddings`, one table per
  embedding table of the feature config, ready to be sharded on parameter servers.
- :mod:`recsys_dist.models.blocks`: MLP, DCN-v2 cross network, FM, DLRM dot interaction,
  MMoE.
- :mod:`recsys_dist.config.model_params`: hyper-parameter dataclasses (no TensorFlow import,
  so config parsing stays light).
- :mod:`recsys_dist.models.zoo`: one module per model, each class bound with ``@zoo_model``
  to the model its params class registers (``recsys_dist/config/model_registry.py``);
  :func:`build_model` and ``MODELS``.
"""
