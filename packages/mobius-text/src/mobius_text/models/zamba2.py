"""Zamba2: Mamba-2 layers, some of which first run a *shared* attention block.

A ``hybrid`` layer runs one of ``num_mem_blocks`` shared transformer blocks on
``concat(hidden, original embeddings)`` (width ``2 * hidden``), projects its
output with the layer's own ``linear``, and adds it to the input of the layer's
Mamba-2 mixer (only there: the residual skips it). The shared blocks have no
residual connections of their own, score with ``(head_dim / 2) ** -0.5``, and
may carry per-use LoRA adapters (``linear_{q,k,v}_adapter_list``,
``gate_up_proj_adapter_list``) indexed by the hybrid layer's rank among hybrid
layers. Checkpoints store each shared block once, under the first hybrid layer
that uses it; later uses reference the same weights (transformers shares them only
when it ties the word embeddings; otherwise every hybrid layer has its own copy,
and so does the graph). A hybrid layer caches its
attention ``key``/``value`` beside its ``conv_state``/``ssm_state``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import (
    Attention,
    Linear,
    RMSNorm,
    apply_rotary,
    get_activation,
    make_rotary_embedding,
    merge_heads,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig
from mobius_text.models.mamba2 import Mamba2Config, Mamba2Mixer
from mobius_text.models.zamba import (
    ZambaForCausalLM,
    ZambaHybridLayer,
    ZambaMambaDecoderLayer,
    ZambaModel,
)


@dataclass
class Zamba2Config(LlamaConfig):
    layers_block_type: list[str] = field(default_factory=list)
    num_mem_blocks: int = 1
    use_shared_attention_adapter: bool = False
    adapter_rank: int = 128
    use_mem_rope: bool = False
    add_bias_linear: bool = False
    mamba: Mamba2Config | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        inner = int(hf_config.mamba_expand * hf_config.hidden_size)
        fields.update(
            layer_types=[],
            sliding_window=None,
            layers_block_type=list(hf_config.layers_block_type),
            num_mem_blocks=hf_config.num_mem_blocks,
            use_shared_attention_adapter=bool(hf_config.use_shared_attention_adapter),
            adapter_rank=hf_config.adapter_rank,
            use_mem_rope=bool(hf_config.use_mem_rope),
            add_bias_linear=bool(hf_config.add_bias_linear),
            mamba=Mamba2Config(
                model_type=hf_config.model_type,
                vocab_size=hf_config.vocab_size,
                hidden_size=hf_config.hidden_size,
                intermediate_size=inner,
                num_hidden_layers=hf_config.num_hidden_layers,
                state_size=hf_config.mamba_d_state,
                conv_kernel=hf_config.mamba_d_conv,
                time_step_rank=0,
                layer_norm_epsilon=1e-5,  # the gated norm's eps is fixed in Zamba2
                use_bias=bool(hf_config.add_bias_linear),
                use_conv_bias=True,  # Zamba2's conv always has a bias
                num_heads=hf_config.n_mamba_heads,
                head_dim=inner // hf_config.n_mamba_heads,
                n_groups=hf_config.mamba_ngroups,
                time_step_limit=(hf_config.time_step_min, float("inf")),
            ),
        )
        return fields

    def shares_blocks(self) -> bool:
        """transformers ties the hybrid layers' blocks only when it ties the word embeddings:
        an untied checkpoint holds (and runs) a separate copy of the block in every hybrid layer."""
        return self.tie_word_embeddings

    def hybrid_uses(self) -> list[int]:
        """Layer index of each hybrid layer, in order (its position here is its adapter index)."""
        return [i for i, kind in enumerate(self.layers_block_type) if kind == "hybrid"]


class Placeholder(nn.Module):
    """An empty slot of an adapter list (HF ``nn.Identity``): the adapter belongs to another block."""


def adapter_list(config: Zamba2Config, block_id: int, dim: int, out: int) -> nn.ModuleList:
    """One slot per hybrid layer; only the slots this shared block serves hold an adapter.

    An adapter is HF's ``nn.Sequential(Linear(dim, rank), Linear(rank, out))`` (keys ``0``, ``1``).
    """
    uses = len(config.hybrid_uses())
    return nn.ModuleList(
        [
            nn.ModuleList([Linear(dim, config.adapter_rank), Linear(config.adapter_rank, out)])
            if i % config.num_mem_blocks == block_id
            else Placeholder()
            for i in range(uses)
        ]
    )


def _apply_adapter(op, adapters, index, x, y):
    """``y + up(down(x))`` with the adapter in slot ``index`` (``y`` when there are none)."""
    if adapters is None:
        return y
    down, up = adapters[index]
    return op.Add(y, up(op, down(op, x)))


class Zamba2Attention(Attention):
    """Attention over ``2 * hidden`` inputs, output to ``hidden``, per-use q/k/v adapters."""

    def __init__(self, config: Zamba2Config, block_id: int) -> None:
        width, heads = 2 * config.hidden_size, config.num_attention_heads
        super().__init__(
            width,
            heads,
            config.num_key_value_heads,
            config.head_dim,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            scale=(config.head_dim / 2) ** -0.5,
        )
        self.o_proj = Linear(heads * config.head_dim, config.hidden_size)
        if config.use_shared_attention_adapter:
            self.linear_q_adapter_list = adapter_list(config, block_id, width, width)
            self.linear_k_adapter_list = adapter_list(config, block_id, width, width)
            self.linear_v_adapter_list = adapter_list(config, block_id, width, width)
        self.adapters = config.use_shared_attention_adapter

    def forward(self, op, x, use, rope, bias, past_key, past_value):
        projections = []
        for proj, name in ((self.q_proj, "q"), (self.k_proj, "k"), (self.v_proj, "v")):
            adapters = getattr(self, f"linear_{name}_adapter_list") if self.adapters else None
            projections.append(
                self.split_heads(op, _apply_adapter(op, adapters, use, x, proj(op, x)))
            )
        q, k, v = projections
        if rope is not None:
            cos, sin = rope
            q = apply_rotary(op, q, cos, sin, self.rotary_dim)
            k = apply_rotary(op, k, cos, sin, self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.o_proj(op, y), (present_key, present_value)


class Zamba2MLP(nn.Module):
    """``down(act(gate) * up)`` from one fused ``gate_up_proj`` plus its per-use adapter."""

    def __init__(self, config: Zamba2Config, block_id: int) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.gate_up_proj = Linear(hidden, 2 * inter, config.add_bias_linear)
        self.down_proj = Linear(inter, hidden, config.add_bias_linear)
        self.gate_up_proj_adapter_list = adapter_list(config, block_id, hidden, 2 * inter)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x, use):
        gate_up = _apply_adapter(
            op, self.gate_up_proj_adapter_list, use, x, self.gate_up_proj(op, x)
        )
        gate, up = op.Split(gate_up, num_outputs=2, axis=-1, _outputs=2)
        return self.down_proj(op, op.Mul(self.act(op, gate), up))


class Zamba2SharedTransformer(nn.Module):
    """``mlp(norm(attn(norm(concat(h, emb)))))``: no residuals inside the shared block."""

    def __init__(self, config: Zamba2Config, block_id: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(2 * config.hidden_size, config.rms_norm_eps)
        self.self_attn = Zamba2Attention(config, block_id)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.feed_forward = Zamba2MLP(config, block_id)

    def forward(self, op, x, original, use, rope, bias, past_key, past_value):
        h = self.input_layernorm(op, op.Concat(x, original, axis=-1))  # [batch, seq, 2*hidden]
        h, present = self.self_attn(op, h, use, rope, bias, past_key, past_value)
        return self.feed_forward(op, self.pre_ff_layernorm(op, h), use), present


class Zamba2MambaDecoderLayer(ZambaMambaDecoderLayer):
    """Zamba's Mamba layer with a Mamba-2 mixer."""

    def make_mixer(self, config: Zamba2Config) -> nn.Module:
        return Mamba2Mixer(config.mamba)


class Zamba2HybridLayer(ZambaHybridLayer):
    """Zamba's hybrid layer; the shared block takes positions and this use's adapters."""

    shared_name = "shared_transformer"
    decoder_class = Zamba2MambaDecoderLayer

    def __init__(self, config: Zamba2Config, shared: Zamba2SharedTransformer, owns: bool, use: int):
        super().__init__(config, shared, owns)
        self.use = use

    def shared_block(self, op, x, original, rope, bias, past_key, past_value):
        return self.shared_transformer(op, x, original, self.use, rope, bias, past_key, past_value)


class Zamba2Model(ZambaModel):
    def make_layers(self, config: Zamba2Config) -> list[nn.Module]:
        blocks: list[Zamba2SharedTransformer] = []
        layers = []
        for kind in config.layers_block_type:
            if kind != "hybrid":
                layers.append(Zamba2MambaDecoderLayer(config))
                continue
            use = sum(isinstance(layer, Zamba2HybridLayer) for layer in layers)
            block_id = use % config.num_mem_blocks
            owns = use < config.num_mem_blocks or not config.shares_blocks()
            if owns:
                blocks.append(Zamba2SharedTransformer(config, block_id))
            shared = blocks[-1] if owns else blocks[block_id]
            layers.append(Zamba2HybridLayer(config, shared, owns, use))
        return layers

    def make_rotary(self, config: Zamba2Config):
        if not config.use_mem_rope:
            return None
        return make_rotary_embedding(config.rope, config.head_dim, config.max_position_embeddings)


class Zamba2ForCausalLM(ZambaForCausalLM):
    config_class = Zamba2Config
    model_class = Zamba2Model

    def mamba_layout(self):
        return self.config.mamba.state_layout()

    def sanitize(self, weights: dict) -> dict:
        """Adapters of a block's later uses are named in the graph after the layer that runs them.

        A graph parameter takes the name of the scope that first uses it, so slot ``j`` of a
        shared block's adapter lists sits under hybrid layer ``j``; the checkpoint keeps the
        whole block under its owner (the block's first use).
        """
        c = self.config
        uses = c.hybrid_uses() if c.shares_blocks() else []
        for use, layer in enumerate(uses[c.num_mem_blocks :], start=c.num_mem_blocks):
            owner = f"model.layers.{uses[use % c.num_mem_blocks]}.shared_transformer."
            slot = f"adapter_list.{use}."
            for key in [k for k in weights if k.startswith(owner) and slot in k]:
                weights[f"model.layers.{layer}.shared_transformer." + key[len(owner) :]] = (
                    weights.pop(key)
                )
        if not c.shares_blocks():  # each copy runs only its own slot; HF never reads the others
            for use, layer in enumerate(c.hybrid_uses()):
                prefix = f"model.layers.{layer}.shared_transformer."
                for key in [k for k in weights if k.startswith(prefix) and "adapter_list." in k]:
                    if not key.split("adapter_list.")[1].startswith(f"{use}."):
                        del weights[key]
        return super().sanitize(weights)


MODEL_TYPES = {"zamba2": Zamba2ForCausalLM}
