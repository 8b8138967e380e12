"""`python -m seq2seq.export ckpt=PATH out=DIR [quantization=int8|float32]`.

Writes a CTranslate2 model of a Transformer checkpoint through CTranslate2's Python spec API,
with the run's tokenizer and config beside it (`seq2seq.ctranslate2_engine`), for
`python -m seq2seq.translate ckpt=DIR engine=ctranslate2`. The spec is the model as
seq2seq/models/transformer.py computes it: pre- or post-norm residual blocks (a final
LayerNorm per stack when pre-norm), the project's sinusoid table written into the spec (it
interleaves sine and cosine, CTranslate2's built-in table does not), embeddings scaled by
sqrt(d_model), the shared embedding and tied output projection, ReLU feed-forward, the
LayerNorm epsilon, and the tokenizer's pieces in id order with its pad/unk/bos/eos. The
recurrent models have no CTranslate2 equivalent and are refused.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from seq2seq.config import register_configs
from seq2seq.ctranslate2_engine import METADATA_FILE, import_ctranslate2
from seq2seq.errors import UserError, exit_on_user_error
from seq2seq.inference import Loaded, load_for_inference
from seq2seq.models.transformer import Transformer
from seq2seq.models.transformer_layers import MultiHeadAttention
from seq2seq.tokenization import BOS_ID, EOS_ID, UNK_ID, Tokenizer

register_configs()

QUANTIZATIONS = ("float32", "int8")


def _array(tensor: Tensor) -> np.ndarray:
    return tensor.detach().cpu().float().numpy().copy()


def _linear(spec: Any, weights: list[nn.Linear]) -> None:
    """One CTranslate2 linear layer from one or more torch ones stacked by output (fused
    projections: Q, K, V of self-attention; K, V of cross-attention)."""
    spec.weight = np.concatenate([_array(w.weight) for w in weights])
    spec.bias = np.concatenate([_array(w.bias) for w in weights])


def _layer_norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _attention(spec: Any, attn: MultiHeadAttention, norm: nn.LayerNorm, self_attn: bool) -> None:
    """CTranslate2 attention: `linear` is [QKV, out] for self-attention, [Q, KV, out] for
    cross-attention; its layer norm is the sublayer's (before it pre-norm, after it post-norm)."""
    if self_attn:
        _linear(spec.linear[0], [attn.w_q, attn.w_k, attn.w_v])
    else:
        _linear(spec.linear[0], [attn.w_q])
        _linear(spec.linear[1], [attn.w_k, attn.w_v])
    _linear(spec.linear[-1], [attn.w_o])
    _layer_norm(spec.layer_norm, norm)


def _feed_forward(spec: Any, ff: nn.Sequential, norm: nn.LayerNorm) -> None:
    first, _, _, second = ff
    _linear(spec.linear_0, [first])
    _linear(spec.linear_1, [second])
    _layer_norm(spec.layer_norm, norm)


def _inputs(spec: Any, emb: nn.Embedding, positions: np.ndarray) -> None:
    """Embedding table, sqrt(d_model) scale and the project's position table."""
    (spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings).weight = (
        _array(emb.weight)
    )
    spec.scale_embeddings = True
    spec.position_encodings.encodings = positions


def alignment_reading(supervised: tuple[int, int | None] | None, num_heads: int
                      ) -> tuple[int, int]:
    """CTranslate2's (alignment_layer, alignment_heads) for the attention the model is read by:
    its `alignment` (the one guided alignment trained), else the last layer's
    mean. CTranslate2 averages the first `alignment_heads` heads, so a single head other than
    head 0 cannot be carried: refused in one line."""
    if supervised is None:
        return -1, num_heads
    layer, head = supervised
    if head is None:
        return layer, num_heads
    if head != 0:
        raise UserError(f"this checkpoint was guided on decoder layer {layer} head {head}; "
                        "CTranslate2 reads the mean of a layer's first N heads (alignment_heads), "
                        "so only head 0 or the mean can be exported")
    return layer, 1


def transformer_spec(model: Transformer, tokenizer: Tokenizer) -> Any:
    """The `ctranslate2.specs.TransformerSpec` of a Transformer and its vocabularies; its
    alignment (return_attention) is the attention the model is read by (`alignment_reading`
    of its `alignment`)."""
    specs = import_ctranslate2().specs
    relu = specs.Activation.RELU
    num_heads = model.encoder_layers[0].self_attn.num_heads
    encoder = specs.TransformerEncoderSpec(len(model.encoder_layers), num_heads,
                                           pre_norm=model.pre_norm, activation=relu)
    alignment_layer, alignment_heads = alignment_reading(model.alignment, num_heads)
    decoder = specs.TransformerDecoderSpec(len(model.decoder_layers), num_heads,
                                           pre_norm=model.pre_norm, activation=relu,
                                           alignment_layer=alignment_layer,
                                           alignment_heads=alignment_heads)
    spec = specs.TransformerSpec(encoder, decoder)
    positions = _array(model.positions)  # (max_len, D)

    _inputs(encoder, model.src_emb, positions)
    for layer_spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, layer.norm1, self_attn=True)
        _feed_forward(layer_spec.ffn, layer.ff.net, layer.norm2)

    _inputs(decoder, model.tgt_emb, positions)
    for layer_spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, layer.norm1, self_attn=True)
        _attention(layer_spec.attention, layer.cross_attn, layer.norm2, self_attn=False)
        _feed_forward(layer_spec.ffn, layer.ff.net, layer.norm3)
    decoder.projection.weight = _array(model.generator.weight)  # no bias
    if model.pre_norm:
        assert isinstance(model.encoder_norm, nn.LayerNorm)
        assert isinstance(model.decoder_norm, nn.LayerNorm)
        _layer_norm(encoder.layer_norm, model.encoder_norm)
        _layer_norm(decoder.layer_norm, model.decoder_norm)

    spec.register_source_vocabulary(tokenizer.src_pieces(range(tokenizer.src_vocab_size)))
    spec.register_target_vocabulary(tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size)))
    unk, bos, eos = tokenizer.tgt_pieces([UNK_ID, BOS_ID, EOS_ID])
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = unk, bos, eos
    spec.config.decoder_start_token = bos
    spec.config.add_source_eos = True  # sources end with EOS, as in training
    spec.config.layer_norm_epsilon = model.encoder_layers[0].norm1.eps
    return spec


def export_ctranslate2(loaded: Loaded, out: Path | str, quantization: str = "float32") -> Path:
    """Write the CTranslate2 export of a loaded Transformer checkpoint into folder `out`.

    The folder is staged beside `out` and renamed into place, so it is whole or absent.

    Raises:
        UserError: a model other than the Transformer, a Transformer with the lexical model or
            relative positions, an unknown quantization, or `out` already exists.
    """
    out = Path(out)
    name = loaded.config.model.name
    if not isinstance(loaded.model, Transformer):
        raise UserError(f"{loaded.checkpoint}: a {name} model has no CTranslate2 equivalent; "
                        "only the Transformer exports")
    if loaded.model.lexical is not None:
        raise UserError(f"{loaded.checkpoint}: CTranslate2's Transformer has no lexical model; "
                        "export a Transformer trained with model.lexical=false")
    if loaded.model.encoder_positions is not None:
        raise UserError(f"{loaded.checkpoint}: the export writes sinusoidal positions only; "
                        "export a Transformer trained with model.positions=sinusoidal")
    if quantization not in QUANTIZATIONS:
        raise UserError(f"quantization={quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    if out.exists():
        raise UserError(f"{out}: already exists; remove it or choose another out=DIR")
    spec = transformer_spec(loaded.model, loaded.tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        spec.save(str(staged))
        loaded.tokenizer.save(staged)
        metadata = {
            "config": OmegaConf.to_container(loaded.config, enum_to_str=True),
            "tokenizer": loaded.tokenizer.identity,
            "checkpoint": str(loaded.checkpoint),
            "step": loaded.step,
            "quantization": quantization,
        }
        (staged / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
        staged.rename(out)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return out


@hydra.main(config_path="../configs", config_name="export", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    for key in ("ckpt", "out"):
        if OmegaConf.is_missing(cfg, key):
            raise UserError(f"{key}=PATH is required (ckpt: the checkpoint, out: the folder "
                            "to write)")
    loaded = load_for_inference(cfg.ckpt, "cpu", cfg.tokenizer_dir)
    out = export_ctranslate2(loaded, cfg.out, str(cfg.quantization))
    print(f"wrote the CTranslate2 model ({cfg.quantization}) of {loaded.checkpoint} to {out}")


if __name__ == "__main__":
    main()
