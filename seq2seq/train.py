"""`python -m seq2seq.train [overrides]`: train one model; `-m` sweeps several."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from seq2seq.config import register_configs
from seq2seq.errors import exit_on_user_error

register_configs()


@hydra.main(config_path="../configs", config_name="config", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> float | None:
    from seq2seq.training.loop import train

    return train(cfg)["best_valid_bleu"]  # what a Hydra sweeper optimises


if __name__ == "__main__":
    main()
