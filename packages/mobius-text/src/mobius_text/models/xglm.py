"""XGLM: fairseq sinusoidal positions (offset 2, the ``pad_token_id`` row zeroed), embeddings
scaled by ``sqrt(d_model)``, pre-norm fairseq layers."""

from __future__ import annotations

from mobius_text.models._gpt_common import (
    FairseqDecoderConfig,
    FairseqPreNormDecoder,
    FixedPositions,
    GPTForCausalLM,
)
from mobius_text.models._sinusoids import tensor2tensor_sinusoids

_POSITION_OFFSET = 2


class XGLMConfig(FairseqDecoderConfig):
    """The fairseq decoder's fields; XGLM names the MLP width and activation its own way."""

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(intermediate_size=hf_config.ffn_dim, hidden_act=hf_config.activation_function)
        return fields


class XGLMModel(FairseqPreNormDecoder):
    def make_positions(self, config: XGLMConfig):
        table = tensor2tensor_sinusoids(
            config.max_position_embeddings + _POSITION_OFFSET,
            config.hidden_size,
            config.pad_token_id,
        )
        return FixedPositions(table, _POSITION_OFFSET)

    def embed(self, op, input_ids, position_ids):
        x = self.embed_tokens(op, input_ids)
        return op.Add(x, self.embed_positions(op, position_ids, x))


class XGLMForCausalLM(GPTForCausalLM):
    config_class = XGLMConfig
    model_class = XGLMModel
    backbone_name = "model"

    def input_embedding(self):
        return self.backbone.embed_tokens


MODEL_TYPES = {"xglm": XGLMForCausalLM}
