"""Training: `loop.train(cfg)` builds the parts of a run (`setup`) and runs the loop over them:
batches (`batches`), the update (`update`, `loss`, `optim`, `ema`), validation and the final
test (`validation`), the training log (`train_log`) and when to stop (`stopping`)."""
