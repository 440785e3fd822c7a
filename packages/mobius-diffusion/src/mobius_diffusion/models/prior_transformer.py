"""PriorTransformer: the prior of unCLIP (Karlo) and Kandinsky 2.x, text embeddings to a CLIP image embedding.

Tokens, in order: the projected text states (``encoder_hidden_states_proj``), the
projected text embedding (``embedding_proj``), the timestep's embedding, the noisy
image embedding (``proj_in``) and the learned ``prd_embedding``; plus
``positional_embedding``, an optional ``norm_in``, ``BasicTransformerBlock``s
(self-attention, GELU feed-forward) under a causal mask that also hides the text's
padding (diffusers' additive -10000s), ``norm_out``, and ``proj_to_clip_embeddings``
of the last (``prd``) token.

Graphs (:class:`mobius.tasks.DenoisingTask`): ``model``: ``hidden_states`` [batch,
embedding_dim], ``timestep`` float32 [batch], ``proj_embedding`` [batch,
embedding_proj_dim], ``encoder_hidden_states`` [batch, num_embeddings, embedding_dim],
``attention_mask`` int64 [batch, num_embeddings] -> ``out_hidden_states`` [batch,
clip_embed_dim] (``predicted_image_embedding``). The text is always ``num_embeddings``
tokens long: the causal mask and the positions are that size, as in diffusers. And
``post_process/model``: ``latents`` -> ``image_embeds``, diffusers'
``post_process_latents`` (``latents * clip_std + clip_mean``), which the pipelines
apply to the final latents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._checks import config_choice, config_int
from mobius_diffusion.models._embeddings import TimestepEmbedding, Timesteps
from mobius_diffusion.models._resnet import activation
from mobius_diffusion.tasks import GraphSpec

_MASKED = -10000.0  # diffusers' additive mask value, for both the padding and the causal mask


@dataclass
class PriorTransformerConfig:
    num_attention_heads: int = 32
    attention_head_dim: int = 64
    num_layers: int = 20
    embedding_dim: int = 768
    num_embeddings: int = 77
    time_embed_act_fn: str = "silu"
    norm_in: bool = False
    embedding_proj_norm: bool = False
    time_embed_dim: int = 2048
    embedding_proj_dim: int = 768
    clip_embed_dim: int = 768

    @classmethod
    def from_hf(cls, config: Any) -> PriorTransformerConfig:
        heads = config_int(config, "num_attention_heads", 32)
        inner = heads * config_int(config, "attention_head_dim", 64)
        embedding_dim = config_int(config, "embedding_dim", 768)
        config_choice(config, "encoder_hid_proj_type", "linear", ("linear",))
        config_choice(config, "added_emb_type", "prd", ("prd",))
        additional = config_int(config, "additional_embeddings", 4)
        if additional != 4:  # diffusers pads the text mask with this many: the four added tokens
            raise ConfigError(
                f"PriorTransformer additional_embeddings {additional} is not built by mobius: "
                f"its tokens after the text are 4 (embedding, time, image, prd)"
            )
        act = getattr(config, "time_embed_act_fn", "silu")
        activation(act)

        def optional_dim(name: str, default: int) -> int:
            return default if getattr(config, name, None) is None else config_int(config, name)

        return cls(
            num_attention_heads=heads,
            attention_head_dim=inner // heads,
            num_layers=config_int(config, "num_layers", 20),
            embedding_dim=embedding_dim,
            num_embeddings=config_int(config, "num_embeddings", 77),
            time_embed_act_fn=act,
            norm_in=config_choice(config, "norm_in_type", None, (None, "layer")) == "layer",
            embedding_proj_norm=config_choice(
                config, "embedding_proj_norm_type", None, (None, "layer")
            )
            == "layer",
            time_embed_dim=optional_dim("time_embed_dim", inner),
            embedding_proj_dim=optional_dim("embedding_proj_dim", embedding_dim),
            clip_embed_dim=optional_dim("clip_embed_dim", embedding_dim),
        )

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


class MaskedSelfAttention(Attention):
    """Self-attention with an additive ``bias`` on the scores."""

    def forward(self, op, x, bias):
        q, k, v = self.to_q(op, x), self.to_k(op, x), self.to_v(op, x)
        return self.to_out[0](op, self.attend(op, q, k, v, bias))


class PriorTransformerBlock(nn.Module):
    """diffusers' ``BasicTransformerBlock`` with no cross-attention: ``norm1``/``attn1``, ``norm3``/``ff``."""

    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.norm1 = LayerNorm(dim, 1e-5)
        self.attn1 = MaskedSelfAttention(dim, heads, head_dim, bias=True)
        self.norm3 = LayerNorm(dim, 1e-5)
        self.ff = FeedForward(dim, activation_fn="gelu")

    def forward(self, op, x, bias):
        x = op.Add(self.attn1(op, self.norm1(op, x), bias), x)
        return op.Add(self.ff(op, self.norm3(op, x)), x)


class PostProcess(nn.Module):
    """diffusers' ``post_process_latents``: ``latents * clip_std + clip_mean``.

    A module of its own so that its graph holds the two parameters: a parameter
    belongs to the first graph whose module call realizes it.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.clip_mean = nn.Parameter([1, dim])
        self.clip_std = nn.Parameter([1, dim])

    def forward(self, op, latents):
        return op.Add(op.Mul(latents, self.clip_std), self.clip_mean)


class PriorTransformer(Model):
    """diffusers' ``PriorTransformer``: ``model`` and ``post_process/model`` (see the module docstring)."""

    config_class = PriorTransformerConfig
    task = "denoising"

    def __init__(self, config: PriorTransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        inner, tokens = c.inner_dim, c.num_embeddings + 4
        self.time_proj = Timesteps(inner, True, 0)
        self.time_embedding = TimestepEmbedding(
            inner, c.time_embed_dim, c.time_embed_act_fn, out_dim=inner
        )
        self.proj_in = Linear(c.embedding_dim, inner, bias=True)
        self.embedding_proj_norm = (
            LayerNorm(c.embedding_proj_dim, 1e-5) if c.embedding_proj_norm else None
        )
        self.embedding_proj = Linear(c.embedding_proj_dim, inner, bias=True)
        self.encoder_hidden_states_proj = Linear(c.embedding_dim, inner, bias=True)
        self.positional_embedding = nn.Parameter([1, tokens, inner])
        self.prd_embedding = nn.Parameter([1, 1, inner])
        self.transformer_blocks = nn.ModuleList(
            [
                PriorTransformerBlock(inner, c.num_attention_heads, c.attention_head_dim)
                for _ in range(c.num_layers)
            ]
        )
        self.norm_in = LayerNorm(inner, 1e-5) if c.norm_in else None
        self.norm_out = LayerNorm(inner, 1e-5)
        self.proj_to_clip_embeddings = Linear(inner, c.clip_embed_dim, bias=True)
        self.post_process = PostProcess(c.clip_embed_dim)

    def sanitize(self, weights: dict) -> dict:
        """``clip_mean`` and ``clip_std`` (the model's own) live in :class:`PostProcess`."""
        return {
            f"post_process.{k}" if k in ("clip_mean", "clip_std") else k: v
            for k, v in weights.items()
        }

    def attention_bias(self, op, attention_mask, like):
        """``[batch, 1, tokens, tokens]``: -10000 on the text's padding plus -10000 above the diagonal."""
        tokens = self.config.num_embeddings + 4
        causal = np.triu(np.full((tokens, tokens), _MASKED, np.float32), 1)
        padding = op.Mul(
            op.Sub(op.CastLike(1.0, like), op.CastLike(attention_mask, like)),
            op.CastLike(_MASKED, like),
        )  # [b, text]
        batch = op.Shape(attention_mask, start=0, end=1)
        added = op.Expand(
            op.CastLike(0.0, like), op.Concat(batch, op.Constant(value_ints=[4]), axis=0)
        )
        padding = op.Unsqueeze(op.Concat(padding, added, axis=1), [1, 2])  # [b, 1, 1, tokens]
        return op.Add(padding, op.CastLike(op.Constant(value=ir.tensor(causal)), like))

    def forward(
        self, op, hidden_states, timestep, proj_embedding, encoder_hidden_states, attention_mask
    ):
        batch = op.Shape(hidden_states, start=0, end=1)
        t = op.Expand(op.Reshape(timestep, op.Constant(value_ints=[-1])), batch)
        time = self.time_embedding(op, self.time_proj(op, t, hidden_states))  # [b, inner]
        if self.embedding_proj_norm is not None:
            proj_embedding = self.embedding_proj_norm(op, proj_embedding)
        single = [
            self.embedding_proj(op, proj_embedding),
            time,
            self.proj_in(op, hidden_states),
        ]  # each [b, inner]
        prd = op.Expand(
            self.prd_embedding, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)
        )
        x = op.Concat(
            self.encoder_hidden_states_proj(op, encoder_hidden_states),
            *(op.Unsqueeze(s, [1]) for s in single),
            prd,
            axis=1,
        )  # [b, text + 4, inner]
        x = op.Add(x, self.positional_embedding)
        if self.norm_in is not None:
            x = self.norm_in(op, x)
        bias = self.attention_bias(op, attention_mask, x)
        for block in self.transformer_blocks:
            x = block(op, x, bias)
        last = op.Gather(self.norm_out(op, x), op.Constant(value_int=-1), axis=1)  # prd: [b, inner]
        return self.proj_to_clip_embeddings(op, last)

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        clip = ["batch", c.clip_embed_dim]
        inputs = {
            "hidden_states": (None, ["batch", c.embedding_dim]),
            "timestep": (ir.DataType.FLOAT, ["batch"]),
            "proj_embedding": (None, ["batch", c.embedding_proj_dim]),
            "encoder_hidden_states": (None, ["batch", c.num_embeddings, c.embedding_dim]),
            "attention_mask": (ir.DataType.INT64, ["batch", c.num_embeddings]),
        }
        return {
            "model": GraphSpec(
                inputs,
                {"out_hidden_states": clip},
                lambda op, **x: {"out_hidden_states": self(op, **x)},
            ),
            "post_process/model": GraphSpec(
                {"latents": (None, clip)},
                {"image_embeds": clip},
                lambda op, latents: {"image_embeds": self.post_process(op, latents)},
            ),
        }


MODEL_TYPES = {"PriorTransformer": PriorTransformer}
