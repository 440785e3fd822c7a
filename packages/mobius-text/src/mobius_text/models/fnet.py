"""FNet: BERT's layers with the real part of a 2-D Fourier transform in place of attention.

Each layer mixes tokens with ``Re(FFT2(x))`` over the sequence and hidden axes
(ONNX ``DFT``), then BERT's feed-forward block. There is no attention mask: as in
transformers, the transform runs over the whole padded sequence, so pads shape
the real tokens' states exactly as they do in PyTorch. The embeddings end in a
``projection``; the heads are BERT's (``cls.predictions``, pooled ``classifier``).
The module tree follows ``FNetFor*`` checkpoints (``fnet.*``, ``cls.*``,
``classifier``).

``use_tpu_fourier_optimizations`` computes the same transform with DFT matrices
(transformers then takes only inputs of exactly ``tpu_short_seq_length`` tokens,
where they equal the FFT); the graph is the FFT, for any length, and the
checkpoint's complex64 matrices are left unread.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius_text.models._bert_common import POOLED_HEADS
from mobius_text.models.bert import (
    BertConfig,
    BertEmbeddings,
    BertForFeatureExtraction,
    BertIntermediate,
    BertPooler,
    BertResidualOutput,
)


def fourier_mix(op, x):
    """``Re(FFT2(x))`` over the sequence and hidden axes of ``x [batch, seq, hidden]``."""
    signal = op.Unsqueeze(x, [-1])  # [batch, seq, hidden, 1]: a real signal
    spectrum = op.DFT(signal, None, op.Constant(value_int=2))  # over hidden: [..., 2] complex
    spectrum = op.DFT(spectrum, None, op.Constant(value_int=1))  # then over the sequence
    return op.Gather(spectrum, op.Constant(value_int=0), axis=-1)  # the real part


class FNetEmbeddings(BertEmbeddings):
    """BERT's embeddings, then a ``projection``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.projection = Linear(config.hidden_size, config.hidden_size, bias=True)

    def forward(self, op, input_ids, token_type_ids):
        return self.projection(op, super().forward(op, input_ids, token_type_ids))


class FNetBasicOutput(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, mixed, residual):
        return self.LayerNorm(op, op.Add(residual, mixed))


class FNetFourierTransform(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.output = FNetBasicOutput(config)

    def forward(self, op, x):
        return self.output(op, fourier_mix(op, x), x)


class FNetLayer(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.fourier = FNetFourierTransform(config)
        self.intermediate = BertIntermediate(hidden, inner, config.hidden_act)
        self.output = BertResidualOutput(inner, hidden, config.layer_norm_eps)

    def forward(self, op, x):
        x = self.fourier(op, x)
        return self.output(op, self.intermediate(op, x), x)


class FNetEncoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([FNetLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x):
        for layer in self.layer:
            x = layer(op, x)
        return x


class FNetModel(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.embeddings = FNetEmbeddings(config)
        self.encoder = FNetEncoder(config)
        uses_pooler = config.head in POOLED_HEADS
        self.pooler = BertPooler(config.hidden_size) if uses_pooler else None

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        """``(last_hidden_state, pooled or None)``; the mask is not read (see the module docstring)."""
        x = self.encoder(op, self.embeddings(op, input_ids, token_type_ids))
        return x, self.pooler(op, x) if self.pooler is not None else None


class FNetForFeatureExtraction(BertForFeatureExtraction):
    """BERT's heads on the FNet encoder (``fnet.*``).

    ``attention_mask`` is still an input, as the task defines; the encoder does not
    read it (only the sentence-embedding pooling does).
    """

    config_class = BertConfig
    base_model_prefix = "fnet"
    model_class = FNetModel

    @property
    def ignored(self) -> tuple[str, ...]:
        """BERT's, and the TPU variant's DFT matrices (the graph computes the same transform)."""
        return (*super().ignored, "fnet.encoder.layer.*.fourier.self.dft_mat_*")


MODEL_TYPES = {"fnet": FNetForFeatureExtraction}
