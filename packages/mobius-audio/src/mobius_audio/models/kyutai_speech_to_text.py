"""Kyutai STT: Mimi's encoder codes the audio, a decoder-only LM reads text and audio streams.

At each position the LM takes one text token and ``num_codebooks`` audio codes; its
input embedding is the sum of their rows in one table (``model.embed_tokens.
embed_tokens``: the text vocabulary, then one block of ``codebook_vocab_size`` rows
per codebook, then the audio padding row, which gets no offset). The layers are
pre-RMSNorm, rotary attention with a KV cache (causal, each query seeing the last
``sliding_window`` positions, as transformers' sliding cache leaves them when it
decodes a token at a time) and a gating MLP (``fc1`` to ``[act half | linear half]``,
``fc2``); ``lm_head`` gives the text logits.

The codec is :mod:`mobius_audio.models.mimi` under ``codec_model.`` (the checkpoint's
flat Mimi layout); only its encoder is built, its decoder's tensors are ignored.
The contract is :mod:`mobius_audio.tasks_streaming_stt`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    ACTIVATIONS,
    Attention,
    DecoderLayer,
    Embedding,
    Linear,
    RMSNorm,
    attention_bias,
    get_activation,
    make_rotary_embedding,
    module_scope,
)
from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.kyutai_features import MAX_STEPS
from mobius_audio.models._checks import positive_int
from mobius_audio.models.mimi import MimiConfig, MimiModel


@dataclass
class KyutaiSpeechToTextConfig:
    model_type: str
    codec: MimiConfig
    vocab_size: int
    codebook_vocab_size: int
    num_codebooks: int
    audio_pad_token_id: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    ffn_dim: int
    hidden_act: str
    rms_norm_eps: float
    rope: RopeConfig
    max_position_embeddings: int
    sliding_window: int | None

    @property
    def table_size(self) -> int:
        """Rows of the shared embedding: text, each codebook's block, the audio padding row."""
        return self.vocab_size + self.num_codebooks * self.codebook_vocab_size + 1

    @classmethod
    def from_hf(cls, hf_config: Any) -> KyutaiSpeechToTextConfig:
        codec = MimiConfig.from_hf(hf_config.codec_config)
        codebooks = positive_int(hf_config, "num_codebooks")
        if codebooks != codec.n_codebooks:
            raise ConfigError(
                f"kyutai_speech_to_text num_codebooks {codebooks} must equal the codec's "
                f"num_quantizers {codec.n_codebooks}: the LM reads every code the codec gives"
            )
        vocab = positive_int(hf_config, "vocab_size")
        codebook_vocab = positive_int(hf_config, "codebook_vocab_size")
        table = vocab + codebooks * codebook_vocab + 1
        pad = hf_config.audio_pad_token_id
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < table:
            raise ConfigError(
                f"kyutai_speech_to_text audio_pad_token_id {pad!r} is not a row of the "
                f"{table}-row embedding"
            )
        if getattr(hf_config, "tie_word_embeddings", False):
            raise ConfigError(
                "kyutai_speech_to_text tie_word_embeddings: the embedding has more rows than "
                "the text vocabulary, lm_head cannot share it"
            )
        heads = positive_int(hf_config, "num_attention_heads")
        kv_heads = positive_int(hf_config, "num_key_value_heads")
        if heads % kv_heads:
            raise ConfigError(
                f"kyutai_speech_to_text num_attention_heads {heads} is not a multiple of "
                f"num_key_value_heads {kv_heads}"
            )
        ffn = positive_int(hf_config, "ffn_dim")
        if ffn % 2:
            raise ConfigError(f"kyutai_speech_to_text ffn_dim {ffn} must be even")
        if hf_config.hidden_act not in ACTIVATIONS:
            raise ConfigError(
                f"kyutai_speech_to_text hidden_act {hf_config.hidden_act!r} is not known"
            )
        window = hf_config.sliding_window
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int) or window <= 0
        ):
            raise ConfigError(
                f"kyutai_speech_to_text sliding_window must be a positive integer or null, got {window!r}"
            )
        eps = hf_config.rms_norm_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ConfigError(f"kyutai_speech_to_text rms_norm_eps must be positive, got {eps!r}")
        return cls(
            model_type="kyutai_speech_to_text",
            codec=codec,
            vocab_size=vocab,
            codebook_vocab_size=codebook_vocab,
            num_codebooks=codebooks,
            audio_pad_token_id=pad,
            hidden_size=positive_int(hf_config, "hidden_size"),
            num_hidden_layers=positive_int(hf_config, "num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=positive_int(hf_config, "head_dim"),
            ffn_dim=ffn,
            hidden_act=hf_config.hidden_act,
            rms_norm_eps=float(eps),
            rope=RopeConfig.from_hf(hf_config),
            max_position_embeddings=positive_int(hf_config, "max_position_embeddings"),
            sliding_window=window,
        )


class KyutaiEmbeddings(nn.Module):
    """``input_ids [batch, seq, 1 + codebooks]`` -> the sum of each stream's row ``[batch, seq, hidden]``."""

    def __init__(self, config: KyutaiSpeechToTextConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.table_size, config.hidden_size)
        blocks = np.arange(config.num_codebooks, dtype=np.int64) * config.codebook_vocab_size
        self.offsets = np.concatenate([[0], blocks + config.vocab_size]).astype(np.int64)
        self.pad = config.audio_pad_token_id

    def forward(self, op, input_ids):
        offsets = op.Constant(value=ir.tensor(self.offsets))
        padding = op.Equal(input_ids, op.Constant(value=ir.tensor(np.array(self.pad, np.int64))))
        rows = op.Where(padding, input_ids, op.Add(input_ids, offsets))
        return op.ReduceSum(self.embed_tokens(op, rows), [2], keepdims=0)


class _Projection(nn.Module):
    """transformers' ``KyutaiSpeechToTextLinear``: a bias-free Linear under ``.linear``."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.linear = Linear(cin, cout)

    def forward(self, op, x):
        return self.linear(op, x)


class KyutaiAttention(Attention):
    """Core's rotary attention with the checkpoint's ``q_proj.linear`` naming."""

    def __init__(self, config: KyutaiSpeechToTextConfig) -> None:
        heads, kv_heads, dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        super().__init__(config.hidden_size, heads, kv_heads, dim)
        self.q_proj = _Projection(config.hidden_size, heads * dim)
        self.k_proj = _Projection(config.hidden_size, kv_heads * dim)
        self.v_proj = _Projection(config.hidden_size, kv_heads * dim)
        self.o_proj = _Projection(heads * dim, config.hidden_size)


class KyutaiGatingMLP(nn.Module):
    """``fc2(act(first half of fc1(x)) * second half)``."""

    def __init__(self, config: KyutaiSpeechToTextConfig) -> None:
        super().__init__()
        self.fc1 = Linear(config.hidden_size, config.ffn_dim)
        self.fc2 = Linear(config.ffn_dim // 2, config.hidden_size)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        activated, linear = op.Split(self.fc1(op, x), num_outputs=2, axis=-1, _outputs=2)
        return self.fc2(op, op.Mul(self.act(op, activated), linear))


class KyutaiLanguageModel(nn.Module):
    """``model.``: the embeddings, the layers and the final norm."""

    def __init__(self, config: KyutaiSpeechToTextConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.rms_norm_eps
        self.embed_tokens = KyutaiEmbeddings(config)
        self.layers = nn.ModuleList(
            [
                DecoderLayer(
                    KyutaiAttention(config),
                    KyutaiGatingMLP(config),
                    RMSNorm(d, eps),
                    RMSNorm(d, eps),
                )
                for _ in range(config.num_hidden_layers)
            ]
        )
        self.norm = RMSNorm(d, eps)
        rows = max(config.max_position_embeddings, MAX_STEPS)  # a fused kernel's table
        self.rotary = make_rotary_embedding(config.rope, config.head_dim, rows)
        self.window = config.sliding_window

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(op, input_ids)
        sequence = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        bias = attention_bias(op, attention_mask, sequence, ir.DataType.FLOAT, self.window)
        position_embeddings = self.rotary(op, position_ids)
        present = []
        for layer, (past_key, past_value) in zip(self.layers, past, strict=True):
            x, kv = layer(op, x, position_embeddings, bias, past_key, past_value)
            present.append(kv)
        return self.norm(op, x), present


class KyutaiSpeechToTextForConditionalGeneration(Model):
    """Hooks of :mod:`mobius_audio.tasks_streaming_stt`: ``encode_audio`` and the LM's ``__call__``."""

    config_class = KyutaiSpeechToTextConfig
    task = "streaming-speech-to-text"
    #: The codec's decoder half (only its encoder is built: the quantizers' output
    #: projections are the decoder's) and its codebooks' k-means flags.
    ignored = (
        "codec_model.decoder.*",
        "codec_model.decoder_transformer.*",
        "codec_model.upsample.*",
        "codec_model.quantizer.*.output_proj.weight",
        "codec_model.quantizer.*.layers.*.codebook.initialized",
    )

    def __init__(self, config: KyutaiSpeechToTextConfig) -> None:
        super().__init__()
        self.config = config
        self.model = KyutaiLanguageModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)
        self.codec_model = MimiModel(config.codec)

    def encode_audio(self, op, input_values):
        """``[batch, channels, samples]`` -> int64 ``[batch, num_codebooks, frames]``."""
        with module_scope(op, self.codec_model):  # its tensors keep their ``codec_model.`` names
            return self.codec_model.encode(op, input_values)

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        """``input_ids [batch, seq, 1 + num_codebooks]`` -> ``(logits, [(key, value)] per layer)``."""
        hidden, present = self.model(op, input_ids, attention_mask, position_ids, past)
        return self.lm_head(op, hidden), present

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(c.num_key_value_heads, c.head_dim, c.head_dim)] * c.num_hidden_layers


MODEL_TYPES = {"kyutai_speech_to_text": KyutaiSpeechToTextForConditionalGeneration}
