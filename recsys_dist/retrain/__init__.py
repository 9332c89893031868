"""Daily retraining and offline evaluation pipelines."""
