"""OpenAI GPT (GPT-1): GPT-2's Conv1D projections and learned positions, in post-norm blocks
``n = ln_1(x + attn(x))``, ``ln_2(n + mlp(n))``, with no final norm.

transformers' implementation keeps no KV cache; the parity run re-reads the whole sequence in
PyTorch at each step while the ONNX graph decodes through its cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Embedding
from mobius_text.models._gpt_common import Conv1D, GPTForCausalLM
from mobius_text.models.gpt2 import GPT2MLP, GPT2Attention, GPT2Block, GPT2Config, GPT2Model

# OpenAI GPT's own activation table: its "gelu" is the tanh approximation.
_ACTIVATIONS = {"gelu": "gelu_new", "relu": "relu", "silu": "silu", "swish": "silu"}


@dataclass
class OpenAIGPTConfig(GPT2Config):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            intermediate_size=4 * fields["hidden_size"],
            hidden_act=_ACTIVATIONS[hf_config.afn],
        )
        return fields


class PostNormBlock(GPT2Block):
    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.attn(op, x, position_embeddings, bias, past_key, past_value)
        n = self.ln_1(op, op.Add(x, h))
        return self.ln_2(op, op.Add(n, self.mlp(op, n))), present


class OpenAIGPTModel(GPT2Model):
    norm_name = None

    def __init__(self, config: OpenAIGPTConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        hidden, inner = config.hidden_size, config.intermediate_size
        self.tokens_embed = Embedding(config.vocab_size, hidden)
        self.positions_embed = Embedding(config.max_position_embeddings, hidden)
        self.h = nn.ModuleList(
            [
                PostNormBlock(
                    GPT2Attention(config, i),
                    GPT2MLP(Conv1D(hidden, inner), Conv1D(inner, hidden), config.hidden_act),
                    hidden,
                    config.layer_norm_eps,
                )
                for i in range(config.num_hidden_layers)
            ]
        )

    def embed(self, op, input_ids, position_ids):
        return op.Add(self.tokens_embed(op, input_ids), self.positions_embed(op, position_ids))


class OpenAIGPTLMHeadModel(GPTForCausalLM):
    config_class = OpenAIGPTConfig
    model_class = OpenAIGPTModel
    ignored = ("*.attn.bias",)  # the causal-mask buffer of older checkpoints

    def input_embedding(self):
        return self.backbone.tokens_embed


MODEL_TYPES = {"openai-gpt": OpenAIGPTLMHeadModel}
