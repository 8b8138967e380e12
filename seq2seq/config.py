"""Typed schemas for every config group, registered in Hydra's ConfigStore.

Each YAML under configs/ extends one of these schemas, so a misspelled key or a value of the
wrong type fails when the config is composed, naming the key, instead of being ignored.
Modules never receive these objects: the edges (cli entry points, builders) unpack them into
plain arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


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


class Cell(Choice):
    gru = "gru"
    lstm = "lstm"


class Score(Choice):
    dot = "dot"
    general = "general"


class AttentionFn(Choice):
    softmax = "softmax"
    sparsemax = "sparsemax"
    entmax15 = "entmax15"


@dataclass
class DataConfig:
    """A parallel corpus and how to clean it."""

    name: str = MISSING  # e.g. ding_de_en: names the cache folder and the run
    source: Source = Source.ding
    src_lang: str = "de"
    tgt_lang: str = "en"
    test_set: str = MISSING  # the name every reported test score carries
    bleu_tokenize: str | None = None  # sacrebleu tokenizer; None: 13a (ko-mecab for Korean)
    root: str | None = None  # where built corpora and tokenizers live; None: <project>/data
    # ding
    raw_path: str | None = None  # a Ding de-en file; None: /usr/share/trans/de-en, else apt-get
    phrase_pairs: bool = False  # add multi-word phrase pairs to the train split only
    # hf
    hf_path: str = "IWSLT/iwslt2017"
    hf_config: str | None = None  # e.g. iwslt2017-de-en
    hf_revision: str = "refs/convert/parquet"
    hf_data_files: dict[str, str] | None = None  # split -> file pattern, overrides config
    # files: split -> path, e.g. {train: corpus/train.de}
    src_files: dict[str, str] | None = None
    tgt_files: dict[str, str] | None = None
    # docs: German-English documentation from Debian packages (seq2seq/data/docs)
    docs_sources: list[str] = field(default_factory=list)  # sources, in order of precedence
    allow_missing: bool = False  # build from the packages at hand if some cannot be fetched
    # cleaning (train split only: valid and test stay as published)
    max_words: int = 100  # drop pairs with more whitespace words than this on either side
    max_ratio: float = 3.0  # drop pairs whose word-count ratio exceeds this (both sides > 3 words)
    max_train_pairs: int | None = None  # keep only the first N training pairs (quick runs)
    # fixed sentences translated at every evaluation; their heatmaps go to TensorBoard
    probe: list[str] = field(default_factory=list)


@dataclass
class TokenizerConfig:
    """sentencepiece settings; the model is trained on the train split only and cached."""

    type: str = "unigram"  # unigram | bpe
    vocab_size: int = 8000
    joint: bool = True  # one vocabulary for both languages (needed to tie all embeddings)
    character_coverage: float = 1.0
    input_sentence_size: int = 2_000_000
    max_src_len: int = 256  # pieces; longer inputs are truncated (with a warning at translate)
    max_tgt_len: int = 256


@dataclass
class DecodingConfig:
    """Search settings, shared by validation, test, evaluate and translate."""

    beam_size: int = 5  # for the final test evaluation, evaluate and translate
    valid_beam_size: int = 1  # during training; 1 is greedy
    length_penalty: float = 1.0  # GNMT alpha: score / ((5 + len) / 6) ** alpha
    max_len_a: float = 1.5  # max output length = a * source length + b
    max_len_b: int = 10
    batch_size: int = 64  # sentences decoded at once


@dataclass
class TrainerConfig:
    """The training loop, its budgets, the runtime and the logging."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    precision: Precision = Precision.auto  # auto: bf16 on CUDA that has it, else fp32
    threads: int | None = None  # torch intra-op threads on the CPU; None: all cores
    seed: int = 1234
    compile: bool = False
    # batches
    batch_tokens: int = 4096  # source+target tokens per batch, per process (padding included)
    accum_steps: int = 1
    num_workers: int = 0
    pad_to_multiple: int = 1  # 8 keeps tensor shapes friendly to GPU kernels and compile
    # optimisation
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    schedule: Schedule = Schedule.constant
    warmup_steps: int = 0
    min_lr: float = 1e-5
    plateau_factor: float = 0.5
    plateau_patience: int = 2  # evaluations without improvement before the lr drops
    label_smoothing: float = 0.1
    # subword regularization (unigram tokenizer): every epoch each training text takes one of
    # its subword_nbest best segmentations, drawn with probability ~ P^alpha; None: the best
    subword_alpha: float | None = None
    subword_nbest: int = 8
    clip_norm: float = 1.0
    ema_decay: float | None = None  # evaluate and save an average of the weights; None: off
    # budgets: the first one reached ends training; None is no limit
    max_steps: int | None = None
    max_epochs: int | None = None
    max_time: float | None = 600.0  # seconds of training (evaluation included)
    # evaluation and checkpoints
    eval_every: int = 500
    eval_max_sentences: int | None = None  # validate on the first N sentences; None: all
    patience: int | None = None  # early stopping: evaluations without a new best BLEU
    save_every: int = 500
    log_every: int = 50
    max_bad_steps: int = 5  # consecutive NaN/inf losses before the run stops
    resume: Any = False  # false | true (this run folder's last.pt) | a checkpoint path
    final_test: bool = True  # decode the test split with the best checkpoint at the end
    progress: bool = True  # progress bar on the console


@dataclass
class ModelConfig:
    """Fields every model config carries; `_target_` names the class Hydra builds."""

    _target_: str = MISSING
    name: str = MISSING


@dataclass
class VanillaConfig(ModelConfig):
    _target_: str = "seq2seq.models.vanilla.VanillaSeq2Seq"
    name: str = "vanilla"
    cell: Cell = Cell.gru
    emb_dim: int = 256
    hidden_size: int = 512
    num_layers: int = 1
    bidirectional: bool = True
    dropout: float = 0.2
    tie_embeddings: bool = False  # decoder input and output embeddings


@dataclass
class BahdanauConfig(ModelConfig):
    _target_: str = "seq2seq.models.bahdanau.Bahdanau"
    name: str = "bahdanau"
    cell: Cell = Cell.gru
    emb_dim: int = 256
    hidden_size: int = 256
    attn_dim: int = 256
    num_layers: int = 1
    dropout: float = 0.2
    tie_embeddings: bool = False  # the target embedding is the output projection
    share_embeddings: bool = False  # one embedding for source and target (joint vocabulary)
    lexical: bool = False  # the lexical output model of Nguyen & Chiang (2018)
    query_word: bool = False  # the previous target word joins the attention query
    conditional: bool = False  # the conditional GRU/LSTM of Nematus (Sennrich 2017)
    attention_fn: AttentionFn = AttentionFn.softmax  # sparsemax, entmax15: sparse weights


@dataclass
class LuongConfig(ModelConfig):
    _target_: str = "seq2seq.models.luong.Luong"
    name: str = "luong"
    cell: Cell = Cell.gru
    score: Score = Score.general  # general | dot
    input_feeding: bool = False  # feed the previous attentional vector into the next step
    emb_dim: int = 256
    hidden_size: int = 256
    num_layers: int = 1
    dropout: float = 0.2
    tie_embeddings: bool = False  # the target embedding is the output projection
    share_embeddings: bool = False  # one embedding for source and target (joint vocabulary)
    lexical: bool = False  # the lexical output model of Nguyen & Chiang (2018)
    attention_fn: AttentionFn = AttentionFn.softmax  # sparsemax, entmax15: sparse weights


@dataclass
class TransformerConfig(ModelConfig):
    _target_: str = "seq2seq.models.transformer.Transformer"
    name: str = "transformer"
    d_model: int = 256
    num_heads: int = 4
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    ff_dim: int = 1024
    dropout: float = 0.1
    attn_dropout: float = 0.1
    pre_norm: bool = True
    tie_embeddings: bool = True  # source, target and output embeddings (joint vocabulary)
    max_len: int = 1024


@dataclass
class CompareConfig:
    variants: list[str] = field(
        default_factory=lambda: ["vanilla", "bahdanau", "luong", "transformer"]
    )
    max_time: float = 720.0  # seconds of training per variant (4 variants: about an hour)
    out_dir: str = "results"


@dataclass
class Config:
    data: DataConfig = MISSING
    tokenizer: TokenizerConfig = MISSING
    model: Any = MISSING
    trainer: TrainerConfig = MISSING
    decoding: DecodingConfig = MISSING
    compare: CompareConfig = field(default_factory=CompareConfig)
    run_dir: str = MISSING  # set from hydra's output folder
    runs_root: str = "runs"  # one TensorBoard root for all runs


@dataclass
class EvaluateConfig:
    """`python -m seq2seq.evaluate`: score a checkpoint on a split of its own corpus."""

    ckpt: str = MISSING  # a checkpoint, e.g. runs/.../checkpoints/best.pt
    split: str = "test"  # train | validation | test
    beam_size: int | None = None  # None: the checkpoint's decoding.beam_size
    batch_size: int | None = None  # sentences decoded at once; None: the checkpoint's
    device: str = "auto"
    output: str | None = None  # hypotheses file; None: <run>/<split>.beam<k>.hyp
    tokenizer_dir: str | None = None  # None: <run>/tokenizer


@dataclass
class TranslateConfig:
    """`python -m seq2seq.translate`: stdin (or a file) to stdout, one line per line."""

    ckpt: str = MISSING
    input: str | None = None  # a UTF-8 text file; None: stdin
    beam_size: int | None = None  # None: the checkpoint's decoding.beam_size
    nbest: int = 1  # > 1 prints `i ||| hypothesis ||| score` lines
    batch_size: int | None = None  # None: the checkpoint's decoding.batch_size
    device: str = "auto"
    attention_dir: str | None = None  # one heatmap PNG per non-empty input line
    tokenizer_dir: str | None = None  # None: <run>/tokenizer


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="data", name="data_schema", node=DataConfig)
    cs.store(group="tokenizer", name="tokenizer_schema", node=TokenizerConfig)
    cs.store(group="trainer", name="trainer_schema", node=TrainerConfig)
    cs.store(group="decoding", name="decoding_schema", node=DecodingConfig)
    cs.store(group="model", name="vanilla_schema", node=VanillaConfig)
    cs.store(group="model", name="bahdanau_schema", node=BahdanauConfig)
    cs.store(group="model", name="luong_schema", node=LuongConfig)
    cs.store(group="model", name="transformer_schema", node=TransformerConfig)
    cs.store(name="evaluate_schema", node=EvaluateConfig)
    cs.store(name="translate_schema", node=TranslateConfig)
