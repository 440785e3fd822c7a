"""OPT: learned positions two rows down the table, pre-norm (or, in opt-350m, post-norm)
fairseq layers, and ``project_in``/``project_out`` when the embeddings are narrower than the
model (``word_embed_proj_dim``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear
from mobius.config import ArchitectureConfig
from mobius_text.models._gpt_common import (
    GPTBackbone,
    GPTForCausalLM,
    OffsetEmbedding,
    PreNormDecoderLayer,
    QKVOutAttention,
    make_lm_head,
)

_POSITION_OFFSET = 2  # fairseq kept rows 0-1 for padding; position p lives in row p + 2


@dataclass
class OPTConfig(ArchitectureConfig):
    word_embed_proj_dim: int = 0
    do_layer_norm_before: bool = True
    final_layer_norm: bool = True
    layer_norm_affine: bool = True

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        hidden, heads = hf_config.hidden_size, hf_config.num_attention_heads
        pre_norm = bool(hf_config.do_layer_norm_before)
        fields.update(
            intermediate_size=hf_config.ffn_dim,
            num_key_value_heads=heads,
            head_dim=hidden // heads,
            hidden_act=hf_config.activation_function,
            rms_norm_eps=1e-5,  # nn.LayerNorm's default: OPT configs carry no epsilon
            attention_bias=bool(hf_config.enable_bias),
            mlp_bias=bool(hf_config.enable_bias),
            tie_word_embeddings=bool(hf_config.tie_word_embeddings),
            rope=None,
            sliding_window=None,
            layer_types=[],
            word_embed_proj_dim=hf_config.word_embed_proj_dim or hidden,
            do_layer_norm_before=pre_norm,
            final_layer_norm=pre_norm and not getattr(hf_config, "_remove_final_layer_norm", False),
            layer_norm_affine=bool(hf_config.layer_norm_elementwise_affine),
        )
        return fields


class PlainLayerNorm(nn.Module):
    """LayerNorm without learned scale or shift (``layer_norm_elementwise_affine=False``)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, op, x):
        ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(self.dim, np.float32))), x)
        return op.LayerNormalization(x, ones, axis=-1, epsilon=self.eps, stash_type=1)


class PostNormDecoderLayer(PreNormDecoderLayer):
    """opt-350m: each residual sum is normalised after it is formed."""

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(op, x, position_embeddings, bias, past_key, past_value)
        x = self.self_attn_layer_norm(op, op.Add(x, h))
        return self.final_layer_norm(op, op.Add(x, self.feed_forward(op, x))), present


class OPTDecoder(GPTBackbone):
    layers_name = "layers"
    norm_name = "final_layer_norm"

    def __init__(self, config: OPTConfig) -> None:
        super().__init__(config)
        hidden, proj_dim = config.hidden_size, config.word_embed_proj_dim
        self.embed_tokens = Embedding(config.vocab_size, proj_dim)
        self.embed_positions = OffsetEmbedding(
            config.max_position_embeddings, hidden, _POSITION_OFFSET
        )
        self.project_in = Linear(proj_dim, hidden) if proj_dim != hidden else None
        self.project_out = Linear(hidden, proj_dim) if proj_dim != hidden else None
        self.layers = nn.ModuleList(
            [self.make_layer(config) for _ in range(config.num_hidden_layers)]
        )
        if config.final_layer_norm:
            self.final_layer_norm = self.make_norm(config)
        else:
            self.norm_name = None

    def make_norm(self, config):
        if config.layer_norm_affine:
            return LayerNorm(config.hidden_size, config.rms_norm_eps)
        return PlainLayerNorm(config.hidden_size, config.rms_norm_eps)

    def make_layer(self, config):
        layer_class = PreNormDecoderLayer if config.do_layer_norm_before else PostNormDecoderLayer
        return layer_class(
            QKVOutAttention(
                config.hidden_size,
                config.num_attention_heads,
                config.head_dim**-0.5,
                bias=config.attention_bias,
                out_bias=config.attention_bias,
            ),
            config.hidden_size,
            config.intermediate_size,
            config.hidden_act,
            config.mlp_bias,
            norm=lambda: self.make_norm(config),
        )

    def embed(self, op, input_ids, position_ids):
        x = self.embed_tokens(op, input_ids)
        if self.project_in is not None:
            x = self.project_in(op, x)
        return op.Add(x, self.embed_positions(op, position_ids))

    def finish(self, op, x):
        return self.project_out(op, x) if self.project_out is not None else x


class OPTModel(nn.Module):
    """HF's extra level: ``model.decoder``."""

    def __init__(self, config: OPTConfig) -> None:
        super().__init__()
        self.decoder = OPTDecoder(config)

    def forward(self, op, *args):
        return self.decoder(op, *args)


class OPTForCausalLM(GPTForCausalLM):
    """The head reads the embedding width (``word_embed_proj_dim``)."""

    config_class = OPTConfig
    model_class = OPTModel
    backbone_name = "model"

    def input_embedding(self):
        return self.backbone.decoder.embed_tokens

    def make_head(self, config):
        return make_lm_head(
            self.input_embedding(), config.tie_word_embeddings, config.word_embed_proj_dim
        )


MODEL_TYPES = {"opt": OPTForCausalLM}
