"""Nemotron-H: a stack of single-mixer blocks, each Mamba-2, attention (NoPE) or a ReLU² MLP.

``layers_block_type`` names each block's mixer; every block is
``x + mixer(norm(x))``. The Mamba-2 mixer clamps dt at ``time_step_min`` on
prefill, as transformers does. Blocks of type ``moe`` are not built yet: a
config that has them is refused rather than approximated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import Attention, Embedding, Linear, RMSNorm, get_activation
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.mamba import HybridModel
from mobius_text.models.mamba2 import Mamba2Config, Mamba2Mixer

SUPPORTED_BLOCKS = ("linear_attention", "full_attention", "mlp")


@dataclass
class NemotronHConfig(LlamaConfig):
    layers_block_type: list[str] = field(default_factory=list)
    mlp_hidden_act: str = "relu2"
    mamba: Mamba2Config | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        blocks = list(hf_config.layers_block_type)
        unsupported = sorted(set(blocks) - set(SUPPORTED_BLOCKS))
        if unsupported:
            raise ValueError(f"Nemotron-H blocks of type {unsupported} are not supported yet")
        fields.update(
            layers_block_type=blocks,
            mlp_hidden_act=hf_config.mlp_hidden_act,
            rms_norm_eps=hf_config.layer_norm_epsilon,
            rope=None,
            mamba=Mamba2Config(
                model_type=hf_config.model_type,
                vocab_size=hf_config.vocab_size,
                hidden_size=hf_config.hidden_size,
                intermediate_size=hf_config.mamba_num_heads * hf_config.mamba_head_dim,
                num_hidden_layers=hf_config.num_hidden_layers,
                state_size=hf_config.ssm_state_size,
                conv_kernel=hf_config.conv_kernel,
                time_step_rank=0,
                layer_norm_epsilon=hf_config.layer_norm_epsilon,
                use_bias=hf_config.use_bias,
                use_conv_bias=hf_config.use_conv_bias,
                hidden_act=hf_config.mamba_hidden_act,
                num_heads=hf_config.mamba_num_heads,
                head_dim=hf_config.mamba_head_dim,
                n_groups=hf_config.n_groups,
                time_step_limit=(hf_config.time_step_min, float("inf")),
            ),
        )
        return fields


class NemotronHMLP(nn.Module):
    """``down(act(up(x)))``: a non-gated MLP (ReLU² by default)."""

    def __init__(self, hidden: int, intermediate: int, act: str, bias: bool) -> None:
        super().__init__()
        self.up_proj = Linear(hidden, intermediate, bias)
        self.down_proj = Linear(intermediate, hidden, bias)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.down_proj(op, self.act(op, self.up_proj(op, x)))


class NemotronHBlock(nn.Module):
    def __init__(self, config: NemotronHConfig, block_type: str) -> None:
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if block_type == "linear_attention":
            self.mixer = Mamba2Mixer(config.mamba)
        elif block_type == "full_attention":
            self.mixer = Attention(
                config.hidden_size,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
                bias=config.attention_bias,
                out_bias=config.attention_bias,
            )
        else:
            self.mixer = NemotronHMLP(
                config.hidden_size, config.intermediate_size, config.mlp_hidden_act, config.mlp_bias
            )
        self.block_type = block_type

    def forward(self, op, x, rope, bias, real, past):
        h = self.norm(op, x)
        present = ()
        if self.block_type == "linear_attention":
            h, present = self.mixer(op, h, real, *past)
        elif self.block_type == "full_attention":
            h, present = self.mixer(op, h, rope, bias, *past)  # rope is None: no positions
        else:
            h = self.mixer(op, h)
        return op.Add(x, h), present


class NemotronHModel(HybridModel):
    """No positional encoding: ``rotary_emb`` stays None."""

    norm_name = "norm_f"

    def __init__(self, config: NemotronHConfig) -> None:
        super().__init__()
        self.embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([NemotronHBlock(config, t) for t in config.layers_block_type])
        self.norm_f = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def embed(self, op, input_ids):
        return self.embeddings(op, input_ids)


class NemotronHForCausalLM(LlamaForCausalLM):
    config_class = NemotronHConfig
    model_class = NemotronHModel
    backbone_name = "backbone"  # as checkpoints name it

    def input_embedding(self):
        return self.backbone.embeddings

    def cache_layout(self):
        c, m = self.config, self.config.mamba
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        layouts = {
            "full_attention": [("key", kv), ("value", kv)],
            "linear_attention": m.state_layout(),
            "mlp": [],
        }
        return [layouts[t] for t in c.layers_block_type]


MODEL_TYPES = {"nemotron_h": NemotronHForCausalLM}
