"""The text decoder of Molmo2 (``molmo2_text``): Qwen3's layers under OLMo's checkpoint names.

What differs from Qwen3 (:mod:`.qwen`):

- the token table has ``vocab_size + additional_vocab_size`` rows (the checkpoint's
  ``wte.embedding`` then ``wte.new_embedding``: the image and frame markers live in the
  extra rows), while ``lm_head`` scores only ``vocab_size`` tokens;
- ``o_proj`` never has a bias, whatever ``attention_bias`` says of q, k and v;
- the checkpoint fuses q, k and v (``att_proj``) and the MLP's up and gate projections
  (``ff_proj``, up first), which :meth:`Molmo2TextForCausalLM.sanitize` splits.

The OLMo-based checkpoints take OLMo 2's pieces (:mod:`.olmo2`): ``qk_norm_type="olmo"``
normalises q and k over all heads at once, ``norm_after`` normalises each branch's output
instead of its input (``attn_norm`` and ``ff_norm`` then sit after attention and MLP). A
RoPE scaled on some layers only (``rope_scaling_layers``) is refused: not built yet.

Built only as the decoder of ``molmo2`` (transformers has no causal LM over it, so
nothing to check a text-only build against), so not registered on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from mobius.components import Attention, Embedding, GatedMLP, RMSNorm, rotary_dim
from mobius.errors import ConfigError
from mobius.weights import DerivedTensor
from mobius_text.models.olmo2 import FullQKNormAttention, PostNormDecoderLayer
from mobius_text.models.qwen import QKNormAttention, Qwen3ForCausalLM, Qwen3Model, QwenConfig

#: Hub checkpoint names (after ``model.transformer.``) -> the decoder's module paths.
_LAYER_RENAMES = {
    "attn_norm": "input_layernorm",
    "ff_norm": "post_attention_layernorm",
    "self_attn.attn_out": "self_attn.o_proj",
    "mlp.ff_out": "mlp.down_proj",
}
#: With ``norm_after`` the two norms follow attention and MLP: OLMo 2's layer names them so.
_POST_NORM_RENAMES = dict(
    _LAYER_RENAMES, attn_norm="post_attention_layernorm", ff_norm="post_feedforward_layernorm"
)


@dataclass
class Molmo2TextConfig(QwenConfig):
    additional_vocab_size: int = 0
    qk_norm_over_heads: bool = False  # OLMo's q/k norms over all heads, not each
    norm_after: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        extra = hf_config.additional_vocab_size
        if not isinstance(extra, int) or extra < 0:
            raise ConfigError(f"molmo2_text: additional_vocab_size {extra!r} is not a count")
        if hf_config.qk_norm_type not in ("qwen3", "olmo"):
            raise ConfigError(f"molmo2_text: unknown qk_norm_type {hf_config.qk_norm_type!r}")
        scaled = list(hf_config.rope_scaling_layers or [])
        if fields["rope"].rope_type != "default" and scaled != list(
            range(fields["num_hidden_layers"])
        ):
            raise ConfigError(
                "molmo2_text: a RoPE scaled on some layers only (rope_scaling_layers "
                f"{scaled}) is not built yet"
            )
        if fields["tie_word_embeddings"] and extra:
            raise ConfigError("molmo2_text: a tied head cannot score the additional vocabulary")
        return dict(
            fields,
            additional_vocab_size=extra,
            qk_norm_over_heads=hf_config.qk_norm_type == "olmo",
            norm_after=bool(hf_config.norm_after),
        )


class Molmo2TextModel(Qwen3Model):
    """Qwen3's backbone over the enlarged token table, ``o_proj`` without a bias; OLMo 2's
    attention and post-norm layers where the config says so."""

    def __init__(self, config: Molmo2TextConfig) -> None:
        super().__init__(config)
        rows = config.vocab_size + config.additional_vocab_size
        self.embed_tokens = Embedding(rows, config.hidden_size)

    def make_attention(self, config, layer_idx) -> Attention:
        attention = FullQKNormAttention if config.qk_norm_over_heads else QKNormAttention
        return attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=False,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )

    def make_layer(self, config, layer_idx):
        if not config.norm_after:
            return super().make_layer(config, layer_idx)
        return PostNormDecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_feedforward_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


def _rows(tensor, start: int, stop: int) -> DerivedTensor:
    """Rows ``start:stop`` of a checkpoint tensor, read when the build needs them."""
    shape = (stop - start, *tensor.shape[1:])
    return DerivedTensor(lambda: tensor.numpy()[start:stop], shape, tensor.dtype)


def _stacked(first, second) -> DerivedTensor:
    shape = (first.shape[0] + second.shape[0], *first.shape[1:])
    return DerivedTensor(
        lambda: np.concatenate([first.numpy(), second.numpy()]), shape, first.dtype
    )


class Molmo2TextForCausalLM(Qwen3ForCausalLM):
    """Molmo2's decoder; built by ``molmo2`` (see the module docstring)."""

    config_class = Molmo2TextConfig
    model_class = Molmo2TextModel

    def sanitize(self, weights: dict) -> dict:
        """The hub layout (``blocks.N``, ``wte``, ``ln_f``, fused projections) to the module tree;
        names already in it are kept."""
        c = self.config
        q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        renames = _POST_NORM_RENAMES if c.norm_after else _LAYER_RENAMES
        out = {}
        for name, tensor in weights.items():
            new = re.sub(r"^model\.blocks\.", "model.layers.", name)
            new = new.replace("model.ln_f.", "model.norm.")
            for old, module in renames.items():
                new = new.replace(f".{old}.", f".{module}.")
            if ".self_attn.att_proj." in new:
                stem, kind = new.split(".att_proj.")
                for proj, start, stop in (("q", 0, q), ("k", q, q + kv), ("v", q + kv, q + 2 * kv)):
                    out[f"{stem}.{proj}_proj.{kind}"] = _rows(tensor, start, stop)
            elif ".mlp.ff_proj." in new:
                stem, kind = new.split(".ff_proj.")
                half = tensor.shape[0] // 2
                out[f"{stem}.up_proj.{kind}"] = _rows(tensor, 0, half)
                out[f"{stem}.gate_proj.{kind}"] = _rows(tensor, half, 2 * half)
            elif new not in ("model.wte.embedding", "model.wte.new_embedding"):
                out[new] = tensor
        if "model.wte.embedding" in weights:
            extra = weights.get("model.wte.new_embedding")
            table = weights["model.wte.embedding"]
            out["model.embed_tokens.weight"] = table if extra is None else _stacked(table, extra)
        return super().sanitize(out)
