"""Checkpoints: writing, finding, checking and restoring them (``store.py``), and seeding a
new model from another run's checkpoint across feature changes (``warm_start.py``).

Training, evaluation, export and daily retraining all read checkpoints through this
package; it depends on the model layer and the storage helpers only.
"""
