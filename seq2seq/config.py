"""Typed schemas for every config group, registered in Hydra's ConfigStore.

The schemas hold the types and the YAML files under configs/ hold the values: no field has a
default here (MISSING), so a value has one home and cannot disagree with another. Each YAML
extends one of these schemas, so a misspelled key or a value of the wrong type fails when the
config is composed, naming the key, instead of being ignored; what each option does is said
beside its value in the YAML. A model schema's `_target_` is the class it describes, not a
setting. Modules never receive these objects: the edges (cli entry points, builders) unpack
them into plain arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from seq2seq.choices import (
    AttentionFn,
    AveragedWeights,
    Cell,
    Engine,
    Init,
    Positions,
    Precision,
    Quantization,
    Schedule,
    Score,
    Source,
)


@dataclass
class DataConfig:
    """The fields of every corpus: where it comes from, its languages, how it is cleaned."""

    name: str = MISSING
    source: Source = MISSING
    src_lang: str = MISSING
    tgt_lang: str = MISSING
    test_set: str = MISSING
    bleu_tokenize: str | None = MISSING
    root: str | None = MISSING
    max_words: int = MISSING
    max_ratio: float = MISSING
    max_train_pairs: int | None = MISSING
    probe: list[str] = MISSING
    probe_reference: str | None = MISSING
    probe_words: list[list[str]] = MISSING  # [target word, source word] pairs
    length_buckets: list[int] = MISSING  # upper bounds (source words) of the length study
    export_dir: str | None = None  # None for the configs saved before the option existed


@dataclass
class DingDataConfig(DataConfig):
    """Ding dictionary example sentences (source: ding)."""

    raw_path: str | None = MISSING
    phrase_pairs: bool = MISSING


@dataclass
class HFDataConfig(DataConfig):
    """A translation corpus on the Hugging Face hub (source: hf)."""

    hf_path: str = MISSING
    hf_config: str | None = MISSING
    hf_revision: str = MISSING
    hf_data_files: dict[str, str] | None = MISSING


@dataclass
class FilesDataConfig(DataConfig):
    """The user's own parallel text files (source: files): split -> path per side."""

    src_files: dict[str, str] = MISSING
    tgt_files: dict[str, str] = MISSING


@dataclass
class DocsDataConfig(DataConfig):
    """Text from Debian packages (source: docs, seq2seq/data/docs)."""

    docs_sources: list[str] = MISSING
    allow_missing: bool = MISSING
    test_buckets: dict[str, int] = MISSING  # domain -> md5 buckets to test, where not 4


@dataclass
class TokenizerConfig:
    """sentencepiece settings; the model is trained on the train split only and cached."""

    type: str = MISSING
    vocab_size: int = MISSING
    joint: bool = MISSING
    character_coverage: float = MISSING
    input_sentence_size: int = MISSING
    max_src_len: int = MISSING
    max_tgt_len: int = MISSING


@dataclass
class DecodingConfig:
    """Search settings, shared by validation, test, evaluate and translate."""

    beam_size: int = MISSING
    valid_beam_size: int = MISSING
    length_penalty: float = MISSING
    max_len_a: float = MISSING
    max_len_b: int = MISSING
    batch_size: int = MISSING
    batch_tokens: int = MISSING


@dataclass
class TrainerConfig:
    """The training loop, its budgets, the runtime and the logging."""

    device: str = MISSING
    precision: Precision = MISSING
    threads: int | None = MISSING
    seed: int = MISSING
    compile: bool = MISSING
    batch_tokens: int = MISSING
    accum_steps: int = MISSING
    num_workers: int = MISSING
    pad_to_multiple: int = MISSING
    lr: float = MISSING
    betas: tuple[float, float] = MISSING
    weight_decay: float = MISSING
    schedule: Schedule = MISSING
    warmup_steps: int = MISSING
    cooldown: float = MISSING
    min_lr: float = MISSING
    plateau_factor: float = MISSING
    plateau_patience: int = MISSING
    label_smoothing: float = MISSING
    subword_alpha: float | None = MISSING
    subword_nbest: int = MISSING
    clip_norm: float = MISSING
    ema_decay: float | None = MISSING
    max_steps: int | None = MISSING
    max_epochs: int | None = MISSING
    max_time: float | None = MISSING
    eval_every: int = MISSING
    eval_max_sentences: int | None = MISSING
    patience: int | None = MISSING
    save_every: int = MISSING
    keep_last: int = MISSING
    log_every: int = MISSING
    max_bad_steps: int = MISSING
    resume: Any = MISSING  # false | true | a checkpoint path
    init_from: str | None = None  # None for the configs saved before the option existed
    # guided alignment (seq2seq/training/guided.py); the defaults are for the configs saved
    # before the options existed
    alignment_weight: float = 0.0
    alignment_layer: int = -1
    alignment_head: int | None = None
    alignment_links: str = "possible"
    alignment_null: str = "skip"
    alignment_level: str = "piece"
    final_test: bool = MISSING
    progress: bool = MISSING


@dataclass
class ModelConfig:
    """Fields every model config carries; `_target_` names the class Hydra builds."""

    _target_: str = MISSING
    name: str = MISSING


@dataclass
class VanillaConfig(ModelConfig):
    _target_: str = "seq2seq.models.vanilla.VanillaSeq2Seq"
    cell: Cell = MISSING
    emb_dim: int = MISSING
    hidden_size: int = MISSING
    num_layers: int = MISSING
    bidirectional: bool = MISSING
    dropout: float = MISSING
    tie_embeddings: bool = MISSING


@dataclass
class BahdanauConfig(ModelConfig):
    _target_: str = "seq2seq.models.bahdanau.Bahdanau"
    cell: Cell = MISSING
    emb_dim: int = MISSING
    hidden_size: int = MISSING
    attn_dim: int = MISSING
    num_layers: int = MISSING
    dropout: float = MISSING
    tie_embeddings: bool = MISSING
    share_embeddings: bool = MISSING
    lexical: bool = MISSING
    query_word: bool = MISSING
    conditional: bool = MISSING
    attention_fn: AttentionFn = MISSING


@dataclass
class LuongConfig(ModelConfig):
    _target_: str = "seq2seq.models.luong.Luong"
    cell: Cell = MISSING
    score: Score = MISSING
    input_feeding: bool = MISSING
    emb_dim: int = MISSING
    hidden_size: int = MISSING
    num_layers: int = MISSING
    dropout: float = MISSING
    tie_embeddings: bool = MISSING
    share_embeddings: bool = MISSING
    lexical: bool = MISSING
    attention_fn: AttentionFn = MISSING
    scaled_score: bool = MISSING


@dataclass
class TransformerConfig(ModelConfig):
    _target_: str = "seq2seq.models.transformer.Transformer"
    d_model: int = MISSING
    num_heads: int = MISSING
    num_encoder_layers: int = MISSING
    num_decoder_layers: int = MISSING
    ff_dim: int = MISSING
    dropout: float = MISSING
    attn_dropout: float = MISSING
    pre_norm: bool = MISSING
    tie_embeddings: bool = MISSING
    max_len: int = MISSING
    lexical: bool = False  # False for the configs saved before the option existed
    init: Init = Init.torch  # torch for the configs saved before the option existed
    positions: Positions = Positions.sinusoidal  # the same for the configs saved before it


@dataclass
class Config:
    """`python -m seq2seq.train` (configs/config.yaml)."""

    data: Any = MISSING  # one of the DataConfig schemas: each configs/data/*.yaml picks its own
    tokenizer: TokenizerConfig = MISSING
    model: Any = MISSING
    trainer: TrainerConfig = MISSING
    decoding: DecodingConfig = MISSING
    run_dir: str = MISSING  # set from hydra's output folder
    runs_root: str = MISSING


@dataclass
class PrepareConfig(Config):
    """`python -m seq2seq.prepare` (configs/prepare.yaml): the training config, and whether to
    print the leakage report (held-out pairs with a twin in train), and where to export it."""

    leakage: bool = MISSING
    export: str | None = MISSING  # a folder for the corpus, tokenizers and links (data/export.py)


@dataclass
class CompareConfig:
    """`python -m seq2seq.compare` (configs/compare.yaml): the variants and their budget."""

    variants: list[str] = MISSING
    max_time: float = MISSING
    out_dir: str = MISSING
    recipe: str | None = MISSING
    jobs: int = MISSING
    from_runs: str | None = None  # an earlier comparison's run folder: studied, not trained


@dataclass
class EvaluateConfig:
    """`python -m seq2seq.evaluate` (configs/evaluate.yaml): score a checkpoint on a split of
    its own corpus."""

    ckpt: Any = MISSING  # a checkpoint, or a list of them: an ensemble
    split: str = MISSING
    beam_size: int | None = MISSING
    batch_size: int | None = MISSING
    device: str = MISSING
    output: str | None = MISSING
    tokenizer_dir: str | None = MISSING


@dataclass
class HeadsConfig:
    """`python -m seq2seq.heads` (configs/heads.yaml): a Transformer's heads, measured."""

    ckpt: str = MISSING
    split: str = MISSING
    select_split: str = MISSING
    max_sentences: int | None = MISSING
    prune_budget: float = MISSING
    device: str = MISSING
    out: str | None = MISSING


@dataclass
class AverageConfig:
    """`python -m seq2seq.average` (configs/average.yaml): average a run's last checkpoints."""

    run: str = MISSING
    last: int = MISSING
    weights: AveragedWeights = MISSING
    output: str | None = MISSING


@dataclass
class TranslateConfig:
    """`python -m seq2seq.translate` (configs/translate.yaml): stdin (or a file) to stdout."""

    ckpt: Any = MISSING  # a checkpoint, or a list of them: an ensemble
    input: str | None = MISSING
    beam_size: int | None = MISSING
    nbest: int = MISSING
    batch_size: int | None = MISSING
    device: str = MISSING
    attention_dir: str | None = MISSING
    tokenizer_dir: str | None = MISSING
    engine: Engine = MISSING
    alignments: bool = MISSING


@dataclass
class ExportConfig:
    """`python -m seq2seq.export` (configs/export.yaml): a Transformer checkpoint to a
    CTranslate2 model folder."""

    ckpt: str = MISSING
    out: str = MISSING
    quantization: Quantization = MISSING
    tokenizer_dir: str | None = MISSING


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="data", name="ding_schema", node=DingDataConfig)
    cs.store(group="data", name="hf_schema", node=HFDataConfig)
    cs.store(group="data", name="files_schema", node=FilesDataConfig)
    cs.store(group="data", name="docs_schema", node=DocsDataConfig)
    cs.store(group="tokenizer", name="tokenizer_schema", node=TokenizerConfig)
    cs.store(group="trainer", name="trainer_schema", node=TrainerConfig)
    cs.store(group="decoding", name="decoding_schema", node=DecodingConfig)
    cs.store(group="model", name="vanilla_schema", node=VanillaConfig)
    cs.store(group="model", name="bahdanau_schema", node=BahdanauConfig)
    cs.store(group="model", name="luong_schema", node=LuongConfig)
    cs.store(group="model", name="transformer_schema", node=TransformerConfig)
    cs.store(name="prepare_schema", node=PrepareConfig)
    cs.store(name="compare_schema", node=CompareConfig)
    cs.store(name="evaluate_schema", node=EvaluateConfig)
    cs.store(name="average_schema", node=AverageConfig)
    cs.store(name="heads_schema", node=HeadsConfig)
    cs.store(name="translate_schema", node=TranslateConfig)
    cs.store(name="export_schema", node=ExportConfig)
