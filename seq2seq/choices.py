"""The string options of the config schemas (seq2seq.config): each a fixed set of values."""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """A string option with a fixed set of values. Typing a field with one makes a wrong value
    fail when the config is composed, with the key and the allowed values in the message. A
    member compares equal to its string, so code reads `cfg.trainer.schedule == "plateau"`."""

    def __str__(self) -> str:
        return str(self.value)


class Source(Choice):
    ding = "ding"
    hf = "hf"
    files = "files"
    docs = "docs"


class Precision(Choice):
    auto = "auto"
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


class Schedule(Choice):
    constant = "constant"
    inverse_sqrt = "inverse_sqrt"
    plateau = "plateau"
    linear = "linear"
    wsd = "wsd"


class AveragedWeights(Choice):
    evaluated = "evaluated"
    trained = "trained"


class Cell(Choice):
    gru = "gru"
    lstm = "lstm"


class Score(Choice):
    dot = "dot"
    general = "general"


class Engine(Choice):
    torch = "torch"
    ctranslate2 = "ctranslate2"


class Quantization(Choice):
    float32 = "float32"
    int8 = "int8"


class Init(Choice):
    torch = "torch"
    xavier = "xavier"


class Positions(Choice):
    sinusoidal = "sinusoidal"
    relative = "relative"


class AttentionFn(Choice):
    softmax = "softmax"
    sparsemax = "sparsemax"
    entmax15 = "entmax15"
