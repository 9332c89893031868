"""The model zoo: embedding lookups, reusable blocks and the registered models.

- :mod:`recsys_dist.models.embedding`: :class:`FeatureEmbeddings`, one table per
  embedding table of the feature config, ready to be sharded on parameter servers.
- :mod:`recsys_dist.models.collection`: a model's embedding groups and their one lookup
  per batch.
- :mod:`recsys_dist.models.blocks`: MLP, DCN-v2 cross network, FM, DLRM dot interaction,
  MMoE.
- :mod:`recsys_dist.config.model_params`: the built-in models' hyper-parameter dataclasses
  and registrations (no TensorFlow import, so config parsing stays light).
- :mod:`recsys_dist.models.zoo`: one module per model, each class named by its model's
  one ``register_model`` call (``recsys_dist/config/model_registry.py``) and imported
  when the model is built; :func:`build_model` and ``MODELS``.
"""
