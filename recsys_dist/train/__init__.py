"""Training: optimizers, the coordinator loop and evaluation on the cluster."""
