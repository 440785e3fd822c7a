"""CodeGen: GPT-J with one fused ``qkv_proj`` laid out for 4-way model parallelism.

The projection is 4 blocks, each holding that shard's query, *value* and key (in that order)
for ``heads/4`` consecutive heads.
"""

from __future__ import annotations

from mobius.components import Linear
from mobius_text.models._gpt_common import SelfAttention
from mobius_text.models.gptj import GPTJConfig, GPTJForCausalLM, GPTJModel, rotate_interleaved

_SHARDS = 4  # HF's mp_num: the layout of every CodeGen checkpoint


class CodeGenAttention(SelfAttention):
    def __init__(self, config: GPTJConfig) -> None:
        heads = config.num_attention_heads
        if heads % _SHARDS:
            raise ValueError(f"CodeGen needs a multiple of {_SHARDS} heads, got {heads}")
        super().__init__(heads, heads, config.head_dim, config.head_dim**-0.5)
        self.qkv_proj = Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = Linear(config.hidden_size, config.hidden_size)
        self.rotary_dim = config.rotary_dim

    def project_qkv(self, op, x):
        shard_dim = self.num_heads // _SHARDS * self.head_dim
        qkv = op.Reshape(
            self.qkv_proj(op, x), op.Constant(value_ints=[0, 0, _SHARDS, 3 * shard_dim])
        )
        q, v, k = op.Split(qkv, num_outputs=3, axis=-1, _outputs=3)  # each [batch, seq, 4, shard]
        merge = op.Constant(value_ints=[0, 0, -1])
        return tuple(self.split_heads(op, op.Reshape(t, merge)) for t in (q, k, v))

    def rotate(self, op, q, k, position_embeddings):
        return rotate_interleaved(op, q, k, position_embeddings, self.rotary_dim)

    def project_out(self, op, y):
        return self.out_proj(op, y)


class CodeGenModel(GPTJModel):
    def make_attention(self, config):
        return CodeGenAttention(config)


class CodeGenForCausalLM(GPTJForCausalLM):
    config_class = GPTJConfig
    model_class = CodeGenModel
    ignored = ("*.attn.causal_mask", "*.attn.masked_bias")  # saved mask buffers


MODEL_TYPES = {"codegen": CodeGenForCausalLM}
