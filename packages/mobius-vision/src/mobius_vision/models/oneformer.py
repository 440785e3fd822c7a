"""OneFormer: Mask2Former's pixel level module and masked-attention decoder, with queries
conditioned on a task ("the task is semantic", "instance" or "panoptic").

The task text's token ids (``task_inputs`` ``[batch, task_seq_len]``, OneFormerProcessor's:
the CLIP tokenizer's ids times its attention mask, so padding is 0) go through a two-layer
MLP as numbers, giving the task token. A small DETR-style decoder (the query transformer)
turns ``num_queries - 1`` copies of it into object queries, attending to the sine
positions of the mask features; the task token is appended as the last query, and the
result runs through Mask2Former's masked-attention layers.

The module tree follows ``OneFormerForUniversalSegmentation`` checkpoints:
``model.pixel_level_module`` is Mask2Former's (:mod:`.mask2former`: the registered backbone
and the deformable pixel decoder); ``model.task_encoder.task_mlp.layers.N.0``;
``model.transformer_module.{queries_embedder, level_embed, decoder.{query_transformer.decoder.
{layers.N, norm}, query_input_projection, decoder_norm, layers.N.{cross_attn.multihead_attn,
self_attn.self_attn, ffn}, class_embed, mask_embed.layers.N.0}}``.

``model.text_mapper`` (a CLIP-like text encoder of the class names) feeds only the
contrastive training loss: inference never runs it, so its tensors are dropped by name
(:data:`TRAINING_ONLY`), as the loss's (``criterion``). The graph is the inference form
whatever ``is_training`` says (transformers then also applies dropout in eval mode).

The backbone is whatever mobius registers for ``backbone_config`` under Mask2Former's pixel
level module (checkpoints use Swin, in its any-size form, and ConvNeXt). Refused in one line
besides Mask2Former's refusals: a DiNAT backbone (neighbourhood
attention, which mobius does not build), ``pre_norm`` decoders, decoder input projections
(``conv_dim != hidden_dim`` or ``enforce_input_proj``: transformers keeps them outside its
state dict, so no checkpoint holds their weights), ``mask_dim != conv_dim`` (the query
transformer's input projection reads the mask features as ``conv_dim`` wide) and a
``layer_norm_eps`` other than 1e-5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.models._conv import Activation, Conv2d, Sequential
from mobius_vision.models._deformable import flatten_map
from mobius_vision.models._detr import DetrAttention, FeedForward, sine_positions
from mobius_vision.models.mask2former import (
    NUM_LEVELS,
    Mask2FormerConfig,
    Mask2FormerMaskPredictor,
    Mask2FormerPixelLevelModule,
    PackedMultiheadAttention,
    fpn_levels,
    pixel_level_backbone,
)
from mobius_vision.models.maskformer import (
    checkpoint_ignored,
    mask_embedder,
    ones_mask,
)
from mobius_vision.tasks.universal_segmentation import UniversalSegmentationModel

#: Checkpoint tensors of training-only modules, with why no graph reads them.
TRAINING_ONLY = {
    "model.text_mapper.*": "the text mapper encodes class-name prompts for the contrastive "
    "training loss; inference never runs it",
}
#: The LayerNorm epsilon mobius's shared Mask2Former layers use.
LAYER_NORM_EPS = 1e-5


@dataclass
class OneFormerConfig(Mask2FormerConfig):
    """Mask2Former's fields (``feature_size`` is OneFormer's ``conv_dim``,
    ``mask_feature_size`` its ``mask_dim``) and the task conditioning's."""

    task_seq_len: int = 77
    query_dec_layers: int = 2
    use_task_norm: bool = True

    @classmethod
    def from_hf(cls, hf_config: Any) -> OneFormerConfig:
        """Normalise a transformers ``OneFormerConfig``; the backbone's through its family."""
        t = hf_config.model_type
        kind = getattr(getattr(hf_config, "backbone_config", None), "model_type", None)
        if kind == "dinat":
            raise ConfigError(
                f"{t}: a DiNAT backbone (neighbourhood attention, natten's kernels) is not "
                "built by mobius; OneFormer checkpoints over Swin or ConvNeXt are"
            )
        hf_backbone, inner = pixel_level_backbone(t, hf_config)
        conv_dim, hidden = int(hf_config.conv_dim), int(hf_config.hidden_dim)
        if conv_dim != hidden or getattr(hf_config, "enforce_input_proj", False):
            raise ConfigError(
                f"{t}: decoder input projections (conv_dim {conv_dim} != hidden_dim {hidden} "
                "or enforce_input_proj) are kept out of transformers' state dict, so no "
                "checkpoint holds their weights"
            )
        if int(hf_config.mask_dim) != conv_dim:
            raise ConfigError(
                f"{t}: mask_dim {hf_config.mask_dim} != conv_dim {conv_dim}: the query "
                "transformer's input projection reads the mask features as conv_dim wide"
            )
        if float(hf_config.layer_norm_eps) != LAYER_NORM_EPS:
            raise ConfigError(f"{t}: layer_norm_eps {hf_config.layer_norm_eps} is not 1e-5")
        config = cls(
            model_type=t,
            backbone_type=hf_backbone.model_type,
            backbone=inner,
            num_channels=int(inner.num_channels),
            num_labels=int(hf_config.num_labels),
            feature_size=conv_dim,
            mask_feature_size=int(hf_config.mask_dim),
            hidden_dim=hidden,
            encoder_feedforward_dim=int(hf_config.encoder_feedforward_dim),
            activation_function="relu",  # OneFormer's decoder layers fix ReLU
            encoder_layers=int(hf_config.encoder_layers),
            decoder_layers=int(hf_config.decoder_layers),
            num_attention_heads=int(hf_config.num_attention_heads),
            dim_feedforward=int(hf_config.dim_feedforward),
            num_queries=int(hf_config.num_queries),
            num_fpn_levels=fpn_levels(t, hf_config.strides, hf_config.common_stride),
            task_seq_len=int(hf_config.task_seq_len),
            query_dec_layers=int(hf_config.query_dec_layers),
            use_task_norm=bool(hf_config.use_task_norm),
        )
        return config.checked()

    def checked(self) -> OneFormerConfig:
        super().checked()
        t = self.model_type
        if self.num_queries < 2:
            raise ConfigError(f"{t}: num_queries must be 2 or more (one is the task token)")
        for name in ("task_seq_len", "query_dec_layers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{t}: {name} must be positive")
        return self


class PredictionHead(nn.Module):
    """transformers' ``OneFormerMLPPredictionHead``: ``layers.N.0`` Linear, ReLU between."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        blocks = []
        for index, (size_in, size_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            last = index == len(dims) - 2
            linear = Linear(size_in, size_out, bias=True)
            blocks.append(Sequential([linear] if last else [linear, Activation("relu")]))
        self.layers = Sequential(blocks)

    def forward(self, op, x):
        return self.layers(op, x)


class OneFormerTaskModel(nn.Module):
    """The task token ``[batch, hidden]``: the task's token ids, as numbers, through an MLP."""

    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        d = config.hidden_dim
        self.task_mlp = PredictionHead([config.task_seq_len, d, d])

    def forward(self, op, task_inputs, like):
        return self.task_mlp(op, op.CastLike(task_inputs, like))


class QueryTransformerLayer(FeedForward):
    """Self-attention over the queries, cross-attention to the memory, a ReLU feed-forward;
    each post-normed (torch's ``nn.MultiheadAttention`` for both attentions)."""

    def __init__(self, config: OneFormerConfig) -> None:
        d, heads = config.hidden_dim, config.num_attention_heads
        nn.Module.__init__(self)
        self.self_attn = PackedMultiheadAttention(d, heads)
        self.multihead_attn = PackedMultiheadAttention(d, heads)
        self.linear1 = Linear(d, config.dim_feedforward, bias=True)
        self.linear2 = Linear(config.dim_feedforward, d, bias=True)
        self.make_activation("relu")
        self.norm1, self.norm2, self.norm3 = LayerNorm(d), LayerNorm(d), LayerNorm(d)

    def update(self, op, hidden):
        return self.linear2(op, self.act(op, self.linear1(op, hidden)))

    def forward(self, op, hidden, memory, memory_positions, query_positions):
        positioned = op.Add(hidden, query_positions)
        attended = self.self_attn(op, positioned, positioned, hidden, None)
        hidden = self.norm1(op, op.Add(hidden, attended))
        keys = op.Add(memory, memory_positions)
        attended = self.multihead_attn(op, op.Add(hidden, query_positions), keys, memory, None)
        hidden = self.norm2(op, op.Add(hidden, attended))
        return self.norm3(op, op.Add(hidden, self.update(op, hidden)))


class QueryTransformerDecoder(nn.Module):
    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        layers = [QueryTransformerLayer(config) for _ in range(config.query_dec_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = LayerNorm(config.hidden_dim)

    def forward(self, op, hidden, memory, memory_positions, query_positions):
        for layer in self.layers:
            hidden = layer(op, hidden, memory, memory_positions, query_positions)
        return self.norm(op, hidden)


class QueryTransformer(nn.Module):
    """transformers' ``OneFormerTransformerDecoderQueryTransformer`` (``decoder`` only)."""

    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        self.decoder = QueryTransformerDecoder(config)

    def forward(self, op, hidden, memory, memory_positions, query_positions):
        return self.decoder(op, hidden, memory, memory_positions, query_positions)


class CrossAttentionLayer(nn.Module):
    """Masked cross-attention to one level (torch's ``nn.MultiheadAttention``), post-normed."""

    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        self.multihead_attn = PackedMultiheadAttention(
            config.hidden_dim, config.num_attention_heads
        )
        self.norm = LayerNorm(config.hidden_dim)

    def forward(self, op, hidden, memory, memory_positions, query_positions, mask_bias):
        keys = op.Add(memory, memory_positions)
        queries = op.Add(hidden, query_positions)
        attended = self.multihead_attn(op, queries, keys, memory, mask_bias)
        return self.norm(op, op.Add(hidden, attended))


class SelfAttentionLayer(nn.Module):
    """Self-attention over the queries, positions on queries and keys, post-normed."""

    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        self.self_attn = DetrAttention(config.hidden_dim, config.num_attention_heads)
        self.norm = LayerNorm(config.hidden_dim)

    def forward(self, op, hidden, query_positions):
        attended = self.self_attn(op, hidden, hidden, None, query_positions, query_positions)
        return self.norm(op, op.Add(hidden, attended))


class FFNLayer(FeedForward):
    """``linear2(relu(linear1(x)))``, post-normed with the residual (``norm``)."""

    def __init__(self, config: OneFormerConfig) -> None:
        d = config.hidden_dim
        nn.Module.__init__(self)
        self.linear1 = Linear(d, config.dim_feedforward, bias=True)
        self.linear2 = Linear(config.dim_feedforward, d, bias=True)
        self.make_activation("relu")
        self.norm = LayerNorm(d)

    def forward(self, op, hidden):
        update = self.linear2(op, self.act(op, self.linear1(op, hidden)))
        return self.norm(op, op.Add(hidden, update))


class OneFormerDecoderLayer(nn.Module):
    """Masked cross-attention, self-attention, feed-forward (Mask2Former's order)."""

    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        self.cross_attn = CrossAttentionLayer(config)
        self.self_attn = SelfAttentionLayer(config)
        self.ffn = FFNLayer(config)

    def forward(self, op, hidden, memory, memory_positions, query_positions, mask_bias):
        hidden = self.cross_attn(op, hidden, memory, memory_positions, query_positions, mask_bias)
        return self.ffn(op, self.self_attn(op, hidden, query_positions))


class MaskHead(Mask2FormerMaskPredictor):
    """Mask2Former's mask predictor with OneFormer's names: ``mask_embed.layers.N.0``."""

    def __init__(self, config: OneFormerConfig) -> None:
        nn.Module.__init__(self)
        d = config.hidden_dim
        self.layers = mask_embedder(d, d, config.mask_feature_size)

    @property
    def mask_embedder(self):
        return self.layers


class OneFormerTransformerDecoder(nn.Module):
    """The query transformer, then the masked-attention layers with their prediction heads:
    ``(class logits, mask logits)`` of the last layer."""

    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        d = config.hidden_dim
        self.config = config
        self.query_transformer = QueryTransformer(config)
        self.query_input_projection = Conv2d(config.feature_size, d, 1)
        self.decoder_norm = LayerNorm(d)
        self.layers = nn.ModuleList(
            [OneFormerDecoderLayer(config) for _ in range(config.decoder_layers - 1)]
        )
        self.class_embed = Linear(d, config.num_labels + 1, bias=True)
        self.mask_embed = MaskHead(config)

    def object_queries(self, op, task_token, query_table, pixel_embeddings):
        """``[batch, queries, d]``: the query transformer's ``queries - 1`` object queries over
        the mask features (sine positions as memory, their projection as its positions),
        then the task token."""
        d = self.config.hidden_dim
        memory = sine_positions(op, ones_mask(op, pixel_embeddings), d // 2, pixel_embeddings)
        memory_positions = flatten_map(op, self.query_input_projection(op, pixel_embeddings))
        object_rows = op.Slice(query_table, [0], [self.config.num_queries - 1], [1])
        token = op.Unsqueeze(task_token, [1])  # [batch, 1, d]
        starts = op.Expand(token, op.Shape(object_rows))
        if not self.config.use_task_norm:  # transformers starts from zeros then
            starts = op.Mul(starts, op.CastLike(op.Constant(value_float=0.0), starts))
        objects = self.query_transformer(op, starts, memory, memory_positions, object_rows)
        return op.Concat(objects, token, axis=1)

    def predict(self, op, hidden, pixel_embeddings, level_map):
        """The prediction heads on ``hidden``: ``(class logits, masks, next layer's bias)``."""
        states = self.decoder_norm(op, hidden)
        masks, bias = self.mask_embed(op, states, pixel_embeddings, level_map)
        return self.class_embed(op, states), masks, bias

    def forward(
        self, op, task_token, query_table, memories, memory_positions, level_maps, pixel_embeddings
    ):
        if self.config.use_task_norm:
            task_token = self.decoder_norm(op, task_token)
        hidden = self.object_queries(op, task_token, query_table, pixel_embeddings)
        classes, masks, bias = self.predict(op, hidden, pixel_embeddings, level_maps[0])
        for index, layer in enumerate(self.layers):
            level = index % NUM_LEVELS
            hidden = layer(op, hidden, memories[level], memory_positions[level], query_table, bias)
            following = level_maps[(index + 1) % NUM_LEVELS]
            classes, masks, bias = self.predict(op, hidden, pixel_embeddings, following)
        return classes, masks


class OneFormerTransformerModule(nn.Module):
    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        d = config.hidden_dim
        self.config = config
        self.queries_embedder = Embedding(config.num_queries, d)
        self.level_embed = Embedding(NUM_LEVELS, d)
        self.decoder = OneFormerTransformerDecoder(config)

    def forward(self, op, level_maps: list, pixel_embeddings, task_token):
        d, queries = self.config.hidden_dim, self.config.num_queries
        memories, positions = [], []
        for i, x in enumerate(level_maps):
            positions.append(sine_positions(op, ones_mask(op, x), d // 2, x))
            level = self.level_embed(op, op.Constant(value_ints=[i]))  # [1, d]
            memories.append(op.Add(flatten_map(op, x), level))
        rows = self.queries_embedder(op, op.Constant(value_ints=list(range(queries))))
        batch = op.Shape(pixel_embeddings, start=0, end=1)
        table = op.Expand(
            op.Unsqueeze(rows, [0]), op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)
        )
        return self.decoder(
            op, task_token, table, memories, positions, level_maps, pixel_embeddings
        )


class OneFormerModel(nn.Module):
    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        self.pixel_level_module = Mask2FormerPixelLevelModule(config)
        self.transformer_module = OneFormerTransformerModule(config)
        self.task_encoder = OneFormerTaskModel(config)

    def forward(self, op, pixel_values, task_inputs):
        pixel_embeddings, level_maps = self.pixel_level_module(op, pixel_values)
        task_token = self.task_encoder(op, task_inputs, pixel_embeddings)
        return self.transformer_module(op, level_maps, pixel_embeddings, task_token)


class OneFormerForUniversalSegmentation(UniversalSegmentationModel):
    """``pixel_values``, ``task_inputs`` -> ``class_queries_logits``, ``masks_queries_logits``
    (the last layer's)."""

    config_class = OneFormerConfig

    def __init__(self, config: OneFormerConfig) -> None:
        super().__init__()
        self.config = config
        self.model = OneFormerModel(config)

    def num_queries(self) -> int:
        return self.config.num_queries

    def task_sequence_length(self) -> int | None:
        return self.config.task_seq_len

    @property
    def ignored(self) -> tuple[str, ...]:
        own = checkpoint_ignored(self.model.pixel_level_module.encoder)
        return (*own, *TRAINING_ONLY)

    def forward(self, op, pixel_values, task_inputs):
        classes, masks = self.model(op, pixel_values, task_inputs)
        return {"class_queries_logits": classes, "masks_queries_logits": masks}


MODEL_TYPES = {"oneformer": OneFormerForUniversalSegmentation}

__all__ = ["TRAINING_ONLY", "OneFormerConfig", "OneFormerForUniversalSegmentation"]
