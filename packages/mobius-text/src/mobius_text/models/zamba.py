"""Zamba: multi-head Mamba-1 layers, some of which first run one shared attention block.

A ``hybrid`` layer runs the shared block on ``concat(hidden, original embeddings)``
(width ``2 * hidden``; attention scores scaled by ``(head_dim / 2) ** -0.5``, no
positional encoding, no residuals inside the block), projects its output with
the layer's own ``linear`` and adds it to the Mamba mixer's input only. The
checkpoint stores the block once, under the first hybrid layer (``shared_transf``),
when transformers ties it, i.e. when it ties the word embeddings; otherwise every
hybrid layer has its own copy.

The mixer is Mamba-1 split into ``n_mamba_heads`` independent heads: ``in_proj``
interleaves x and gate channels, and each head has its own ``x_proj``,
``dt_proj``, ``A`` and ``D`` (stacked tensors ``[heads, ...]``). The ssm state is
``[batch, heads, head_dim, state_size]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    GatedMLP,
    Linear,
    RMSNorm,
    get_activation,
    split_heads,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.mamba import DepthwiseConv1d, hybrid_masks, selective_scan


@dataclass
class ZambaConfig(LlamaConfig):
    layers_block_type: list[str] = field(default_factory=list)
    n_mamba_heads: int = 2
    mamba_d_state: int = 16
    mamba_d_conv: int = 4
    mamba_expand: int = 2
    mamba_dt_rank: int = 1
    mamba_conv_bias: bool = True
    mamba_proj_bias: bool = False
    hidden_mamba_act: str = "silu"

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            layer_types=[],
            sliding_window=None,
            rope=None,
            head_dim=hf_config.attention_head_dim,
            layers_block_type=list(hf_config.layers_block_type),
            **{
                name: getattr(hf_config, name)
                for name in (
                    "n_mamba_heads",
                    "mamba_d_state",
                    "mamba_d_conv",
                    "mamba_expand",
                    "mamba_dt_rank",
                    "mamba_conv_bias",
                    "mamba_proj_bias",
                    "hidden_mamba_act",
                )
            },
        )
        return fields

    @property
    def mamba_inner(self) -> int:
        return self.mamba_expand * self.hidden_size


class ZambaMambaMixer(nn.Module):
    """Mamba-1 run as ``n_mamba_heads`` independent heads over slices of the inner channels."""

    def __init__(self, config: ZambaConfig) -> None:
        super().__init__()
        inner, heads = config.mamba_inner, config.n_mamba_heads
        head_dim, rank, n = inner // heads, config.mamba_dt_rank, config.mamba_d_state
        self.in_proj = Linear(config.hidden_size, 2 * inner, config.mamba_proj_bias)
        self.conv1d = DepthwiseConv1d(inner, config.mamba_d_conv, config.mamba_conv_bias)
        self.x_proj_weight = nn.Parameter([heads, rank + 2 * n, head_dim])
        self.dt_proj_weight = nn.Parameter([heads, head_dim, rank])
        self.dt_proj_bias = nn.Parameter([heads, head_dim])
        self.A_log = nn.Parameter([heads, head_dim, n])
        self.D = nn.Parameter([heads, head_dim])
        self.out_proj = Linear(inner, config.hidden_size, config.mamba_proj_bias)
        self.act = get_activation(config.hidden_mamba_act)
        self.inner, self.heads, self.head_dim = inner, heads, head_dim
        self.rank, self.n = rank, n

    def forward(self, op, x, real, conv_state, ssm_state):
        x = op.Mul(x, real)  # padding positions contribute nothing
        # in_proj interleaves channels: x is every even one, the gate every odd one.
        projected = op.Reshape(self.in_proj(op, x), [0, 0, self.inner, 2])
        xs, gate = op.Split(projected, num_outputs=2, axis=-1, _outputs=2)
        xs = op.Transpose(op.Squeeze(xs, [-1]), perm=[0, 2, 1])  # [batch, inner, seq]
        gate = op.Squeeze(gate, [-1])  # [batch, seq, inner]
        xs, new_conv_state = self.conv1d.causal(op, conv_state, xs)
        xs = self.act(op, xs)  # [batch, inner, seq]
        xs = op.Mul(op.Transpose(xs, perm=[0, 2, 1]), real)  # [batch, seq, inner]

        heads_x = split_heads(op, xs, self.heads, self.head_dim)  # [batch, heads, seq, p]
        params = op.MatMul(heads_x, op.Transpose(self.x_proj_weight, perm=[0, 2, 1]))
        dt, b, c = op.Split(params, [self.rank, self.n, self.n], axis=-1, _outputs=3)
        dt = op.MatMul(dt, op.Transpose(self.dt_proj_weight, perm=[0, 2, 1]))  # [b, h, seq, p]
        dt = op.Softplus(op.Add(dt, op.Unsqueeze(self.dt_proj_bias, [1])))
        dt = op.Unsqueeze(op.Transpose(dt, perm=[0, 1, 3, 2]), [-1])  # [batch, heads, p, seq, 1]
        x_t = op.Transpose(heads_x, perm=[0, 1, 3, 2])  # [batch, heads, p, seq]
        a = op.Unsqueeze(op.Neg(op.Exp(self.A_log)), [2])  # [heads, p, 1, n]
        decay = op.Exp(op.Mul(dt, a))  # [batch, heads, p, seq, n]
        update = op.Mul(op.Mul(dt, op.Unsqueeze(x_t, [-1])), op.Unsqueeze(b, [2]))

        # Heads are independent: scan them as extra batch rows.
        seq = op.Shape(x, start=1, end=2)
        flat = op.Concat([-1, self.head_dim], seq, [self.n], axis=0)  # [batch*heads, p, seq, n]
        y, new_ssm_state = selective_scan(
            op,
            op.Reshape(ssm_state, [-1, self.head_dim, self.n]),
            op.Reshape(decay, flat),
            op.Reshape(update, flat),
            op.Reshape(c, op.Concat([-1], seq, [self.n], axis=0)),
        )  # y: [batch*heads, p, seq]
        y = op.Reshape(y, op.Shape(x_t))  # [batch, heads, p, seq]
        y = op.Add(y, op.Mul(x_t, op.Unsqueeze(self.D, [-1])))
        y = op.Reshape(op.Transpose(y, perm=[0, 3, 1, 2]), [0, 0, -1])  # [batch, seq, inner]
        y = op.Mul(y, self.act(op, gate))
        new_ssm_state = op.Reshape(new_ssm_state, op.Shape(ssm_state))
        return self.out_proj(op, y), (new_conv_state, new_ssm_state)


class ZambaAttention(Attention):
    """Attention over ``2 * hidden`` inputs, output to ``hidden``, scores scaled by ``(d/2)^-0.5``."""

    def __init__(self, config: ZambaConfig) -> None:
        heads = config.num_attention_heads
        super().__init__(
            2 * config.hidden_size,
            heads,
            config.num_key_value_heads,
            config.head_dim,
            scale=(config.head_dim / 2) ** -0.5,
        )
        self.o_proj = Linear(heads * config.head_dim, config.hidden_size)


class ZambaSharedTransformer(nn.Module):
    """``mlp(norm(attn(norm(concat(h, emb)))))``: no residuals inside the shared block."""

    def __init__(self, config: ZambaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(2 * config.hidden_size, config.rms_norm_eps)
        self.self_attn = ZambaAttention(config)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.feed_forward = GatedMLP(
            config.hidden_size, config.intermediate_size, config.hidden_act
        )

    def forward(self, op, x, original, bias, past_key, past_value):
        h = self.input_layernorm(op, op.Concat(x, original, axis=-1))  # [batch, seq, 2*hidden]
        h, present = self.self_attn(op, h, None, bias, past_key, past_value)  # no positions
        return self.feed_forward(op, self.pre_ff_layernorm(op, h)), present


class ZambaMambaDecoderLayer(nn.Module):
    """``x + mamba(norm(x + injected))``: the shared block's output enters the mixer only."""

    def __init__(self, config: ZambaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mamba = self.make_mixer(config)

    def make_mixer(self, config: ZambaConfig) -> nn.Module:
        return ZambaMambaMixer(config)

    def forward(self, op, x, real, conv_state, ssm_state, injected=None):
        h = x if injected is None else op.Add(x, injected)
        h, present = self.mamba(op, self.input_layernorm(op, h), real, conv_state, ssm_state)
        return op.Add(x, h), present


class ZambaHybridLayer(nn.Module):
    """The shared block (owned or borrowed), this layer's ``linear``, then the Mamba layer."""

    shared_name = "shared_transf"  # the checkpoint's name of the shared block
    decoder_class = ZambaMambaDecoderLayer

    def __init__(self, config: ZambaConfig, shared: nn.Module, owns: bool) -> None:
        super().__init__()
        if owns:
            setattr(self, self.shared_name, shared)
        else:  # a later use of a tied block: its weights live under the owner's name
            object.__setattr__(self, self.shared_name, shared)
        self.linear = Linear(config.hidden_size, config.hidden_size)
        self.mamba_decoder = self.decoder_class(config)

    def shared_block(self, op, x, original, rope, bias, past_key, past_value):
        """The shared block's output and its present key/value (Zamba's has no positions)."""
        return self.shared_transf(op, x, original, bias, past_key, past_value)

    def forward(self, op, x, original, rope, bias, real, past_key, past_value, conv, ssm):
        t, (key, value) = self.shared_block(op, x, original, rope, bias, past_key, past_value)
        x, (conv, ssm) = self.mamba_decoder(op, x, real, conv, ssm, self.linear(op, t))
        return x, (key, value, conv, ssm)


class ZambaModel(nn.Module):
    def __init__(self, config: ZambaConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(self.make_layers(config))
        self.final_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = self.make_rotary(config)

    def make_layers(self, config: ZambaConfig) -> list[nn.Module]:
        layers, shared = [], None
        for kind in config.layers_block_type:
            if kind != "hybrid":
                layers.append(ZambaMambaDecoderLayer(config))
                continue
            # transformers ties the block across hybrid layers only when it ties the embeddings.
            owns = shared is None or not config.tie_word_embeddings
            if owns:
                shared = ZambaSharedTransformer(config)
            layers.append(ZambaHybridLayer(config, shared, owns))
        return layers

    def make_rotary(self, config: ZambaConfig):
        """The shared blocks' rotary embedding; Zamba's have none."""
        return None

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        original = x
        bias, real = hybrid_masks(op, input_ids, attention_mask, x)
        rope = self.rotary_emb(op, position_ids) if self.rotary_emb is not None else None
        presents = []
        for layer, layer_past in zip(self.layers, past, strict=True):
            if isinstance(layer, ZambaHybridLayer):
                x, present = layer(op, x, original, rope, bias, real, *layer_past)
            else:
                x, present = layer(op, x, real, *layer_past)
            presents.append(present)
        return self.final_layernorm(op, x), presents


class ZambaForCausalLM(LlamaForCausalLM):
    config_class = ZambaConfig
    model_class = ZambaModel

    def mamba_layout(self):
        """The cache of one Mamba layer: its conv window and its per-head SSM state."""
        c = self.config
        return [
            ("conv_state", ["batch", c.mamba_inner, c.mamba_d_conv - 1]),
            (
                "ssm_state",
                ["batch", c.n_mamba_heads, c.mamba_inner // c.n_mamba_heads, c.mamba_d_state],
            ),
        ]

    def cache_layout(self):
        c = self.config
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        mamba = self.mamba_layout()
        hybrid = [("key", kv), ("value", kv), *mamba]
        return [hybrid if kind == "hybrid" else mamba for kind in c.layers_block_type]


MODEL_TYPES = {"zamba": ZambaForCausalLM}
