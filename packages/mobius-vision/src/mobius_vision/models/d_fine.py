"""D-FINE: RT-DETR (:mod:`.rt_detr`) with an HGNetV2 backbone, GELAN fusion blocks, and boxes
refined as distributions (fine-grained distribution refinement).

What changes from RT-DETR, as transformers' ``DFineForObjectDetection`` computes it in eval:

- the hybrid encoder's FPN/PAN blocks are RepNCSPELAN4 (a split, two CSP branches, all
  concatenated), its lateral convs have no activation, its downsampling is a 1x1 conv and a
  depthwise 3x3 stride-2 conv (SCDown);
- the decoder's deformable attention reads the levels themselves (no value or output
  projection), scales its box offsets per point (``num_points_scale``) and by
  ``decoder_offset_scale``; a gate (``gateway``) replaces the residual's LayerNorm;
- after the first layer a head (``pre_bbox_head``) sets the initial boxes; each layer's box
  head predicts, per side, a distribution over ``max_num_bins + 1`` bins, accumulated over
  the layers; its expectation under a weighting function (from the checkpoint's ``up`` and
  ``reg_scale``) moves each side of the initial box;
- the class logits of the last layer get a quality term from the distributions' top
  probabilities (LQE, a ``TopK`` over the bins: exact ties in probability could order
  differently from ``torch.topk``, but only the values are used, so they do not matter).

``eval_idx`` must name the last layer (the checkpoints' ``-1``): layers after it run in
transformers without changing the outputs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.models._conv import Identity
from mobius_vision.models._deformable import (
    MultiscaleDeformableAttention,
    point_scaled_box_locations,
)
from mobius_vision.models._detr import DetrMLPPredictionHead, float_constant
from mobius_vision.models.rt_detr import (
    ConvBatchNorm,
    ConvNormLayer,
    RepVggBlock,
    RTDetrConfig,
    RTDetrDecoder,
    RTDetrDecoderLayer,
    RTDetrHybridEncoder,
    RTDetrModel,
    inverse_sigmoid,
)
from mobius_vision.models.rt_detr_v2 import RTDetrV2ForObjectDetection

#: The GELAN blocks' own activation (transformers' default ``act="silu"``, not the config's).
ELAN_ACTIVATION = "silu"
#: The query positions' clamp.
POSITION_CLAMP = 10.0
#: ``final_layer_norm``'s input clamp (float16's range).
HIDDEN_CLAMP = 65504.0


@dataclass
class DFineConfig(RTDetrConfig):
    decoder_offset_scale: float = 0.5
    max_num_bins: int = 32
    depth_mult: float = 1.0
    top_prob_values: int = 4
    lqe_hidden_dim: int = 64
    lqe_layers: int = 2

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        points = hf_config.decoder_n_points
        if isinstance(points, (list, tuple)):
            if len(set(points)) != 1:
                raise ConfigError(f"d_fine: per-level decoder_n_points {points} are not supported")
            hf_config = copy.copy(hf_config)  # the same count at every level: read it as one
            hf_config.decoder_n_points = points[0]
        fields = super().hf_fields(hf_config)
        if hf_config.decoder_method != "default":
            raise ConfigError(
                f"d_fine: decoder_method {hf_config.decoder_method!r} is not supported"
            )
        layers = fields["decoder_layers"]
        if hf_config.eval_idx not in (-1, layers - 1):
            raise ConfigError(f"d_fine: eval_idx {hf_config.eval_idx} is not the last layer")
        for name in ("max_num_bins", "top_prob_values", "lqe_hidden_dim", "lqe_layers"):
            value = getattr(hf_config, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"d_fine: {name} {value!r} is not a positive integer")
        if hf_config.max_num_bins % 2 or hf_config.max_num_bins < 4:
            raise ConfigError(f"d_fine: max_num_bins {hf_config.max_num_bins} is not even and >= 4")
        if hf_config.top_prob_values > hf_config.max_num_bins + 1:
            raise ConfigError("d_fine: top_prob_values exceeds the bins")
        return dict(
            fields,
            decoder_offset_scale=float(hf_config.decoder_offset_scale),
            max_num_bins=hf_config.max_num_bins,
            depth_mult=float(hf_config.depth_mult),
            top_prob_values=hf_config.top_prob_values,
            lqe_hidden_dim=hf_config.lqe_hidden_dim,
            lqe_layers=hf_config.lqe_layers,
        )


class DFineCSPRepLayer(nn.Module):
    """Two 1x1 branches, one through RepVGG blocks, summed (then a 1x1 conv where the widths
    differ)."""

    def __init__(self, config: DFineConfig, in_ch: int, out_ch: int, blocks: int) -> None:
        super().__init__()
        act = config.activation_function
        self.conv1 = ConvNormLayer(config, in_ch, out_ch, 1, act=act)
        self.conv2 = ConvNormLayer(config, in_ch, out_ch, 1, act=act)
        self.bottlenecks = nn.ModuleList([RepVggBlock(config, out_ch) for _ in range(blocks)])
        self.conv3 = Identity()

    def forward(self, op, x):
        branch = self.conv1(op, x)
        for block in self.bottlenecks:
            branch = block(op, branch)
        return self.conv3(op, op.Add(branch, self.conv2(op, x)))


class RepNCSPELAN4(nn.Module):
    """A 1x1 conv split in two halves; the second through two (CSP, 3x3 conv) steps; the
    halves and both steps' outputs concatenated and fused by a 1x1 conv."""

    def __init__(self, config: DFineConfig) -> None:
        super().__init__()
        d = config.encoder_hidden_dim
        branch = round(config.hidden_expansion * d // 2)
        blocks = round(3 * config.depth_mult)
        act = ELAN_ACTIVATION
        self.half = d
        self.conv1 = ConvNormLayer(config, 2 * d, 2 * d, 1, act=act)
        self.csp_rep1 = DFineCSPRepLayer(config, d, branch, blocks)
        self.conv2 = ConvNormLayer(config, branch, branch, 3, act=act)
        self.csp_rep2 = DFineCSPRepLayer(config, branch, branch, blocks)
        self.conv3 = ConvNormLayer(config, branch, branch, 3, act=act)
        self.conv4 = ConvNormLayer(config, 2 * d + 2 * branch, d, 1, act=act)

    def forward(self, op, x):
        first, second = op.Split(self.conv1(op, x), num_outputs=2, axis=1, _outputs=2)
        step1 = self.conv2(op, self.csp_rep1(op, second))
        step2 = self.conv3(op, self.csp_rep2(op, step1))
        return self.conv4(op, op.Concat(first, second, step1, step2, axis=1))


class SCDown(nn.Module):
    """A 1x1 conv layer, then a depthwise 3x3 stride-2 one (no activations)."""

    def __init__(self, config: DFineConfig) -> None:
        super().__init__()
        d = config.encoder_hidden_dim
        self.conv1 = ConvNormLayer(config, d, d, 1)
        self.conv2 = ConvNormLayer(config, d, d, 3, 2, groups=d)

    def forward(self, op, x):
        return self.conv2(op, self.conv1(op, x))


class DFineHybridEncoder(RTDetrHybridEncoder):
    def lateral_conv(self, config: DFineConfig) -> nn.Module:
        d = config.encoder_hidden_dim
        return ConvNormLayer(config, d, d, 1, 1)

    def fusion_block(self, config: DFineConfig) -> nn.Module:
        return RepNCSPELAN4(config)

    def downsample_conv(self, config: DFineConfig) -> nn.Module:
        return SCDown(config)


class DFineMultiscaleDeformableAttention(MultiscaleDeformableAttention):
    """Samples the levels themselves (no value or output projection); box offsets times
    ``num_points_scale`` and ``offset_scale``."""

    def __init__(self, config: DFineConfig) -> None:
        nn.Module.__init__(self)
        heads, levels = config.decoder_attention_heads, config.num_feature_levels
        points = config.decoder_n_points
        self.num_heads, self.num_levels, self.num_points = heads, levels, points
        self.head_dim = config.d_model // heads
        self.box_references = True
        self.offset_scale = config.decoder_offset_scale
        self.sampling_offsets = Linear(config.d_model, heads * levels * points * 2, bias=True)
        self.attention_weights = Linear(config.d_model, heads * levels * points, bias=True)
        self.num_points_scale = nn.Parameter([levels * points])

    def forward(self, op, hidden, memory, reference_points, level_shapes):
        """The sampled sum of the levels ``memory`` for ``hidden`` (positions already added)."""
        return self.attend(op, hidden, memory, reference_points, level_shapes)

    def box_locations(self, op, reference, offsets):
        return point_scaled_box_locations(
            op,
            reference,
            offsets,
            self.num_points_scale,
            self.num_levels,
            self.num_points,
            self.offset_scale,
        )


class DFineGate(nn.Module):
    """``norm(g1 * residual + g2 * hidden)`` with ``g1, g2 = sigmoid(gate([residual, hidden]))``."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__()
        self.gate = Linear(2 * d_model, 2 * d_model, bias=True)
        self.norm = LayerNorm(d_model, eps)

    def forward(self, op, residual, hidden):
        gates = op.Sigmoid(self.gate(op, op.Concat(residual, hidden, axis=-1)))
        first, second = op.Split(gates, num_outputs=2, axis=-1, _outputs=2)
        return self.norm(op, op.Add(op.Mul(first, residual), op.Mul(second, hidden)))


class DFineDecoderLayer(RTDetrDecoderLayer):
    """Self-attention, deformable attention (positions added first) through the gate,
    feed-forward with the clamped final norm."""

    def __init__(self, config: DFineConfig) -> None:
        super().__init__(config)
        del self.encoder_attn_layer_norm
        self.gateway = DFineGate(config.d_model, 1e-5)

    def cross_attention(self, config: DFineConfig) -> nn.Module:
        return DFineMultiscaleDeformableAttention(config)

    def forward(self, op, hidden, positions, memory, boxes, level_shapes):
        attended = self.self_attn(op, hidden, hidden, None, positions, positions)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attended))
        references = op.Unsqueeze(boxes, [2])
        attended = self.encoder_attn(
            op, op.Add(hidden, positions), memory, references, level_shapes
        )
        hidden = self.gateway(op, hidden, attended)
        hidden = op.Add(hidden, self.feed_forward(op, hidden))
        limit = float_constant(op, HIDDEN_CLAMP, hidden)
        return self.final_layer_norm(op, op.Clip(hidden, op.Neg(limit), limit))


def weighting_function(op, max_num_bins: int, up, reg_scale):
    """transformers' ``weighting_function``: ``[bins + 1]`` offsets, 0 in the middle, growing
    geometrically to ``+-2 |up| |reg_scale|`` at the ends."""
    bound = op.Mul(op.Abs(up), op.Abs(reg_scale))  # [1]
    step = op.Pow(
        op.Add(bound, float_constant(op, 1.0, bound)),
        float_constant(op, 2.0 / (max_num_bins - 2), bound),
    )
    half = max_num_bins // 2
    left_powers = float_constant(op, [float(i) for i in range(half - 1, 0, -1)], bound)
    right_powers = float_constant(op, [float(i) for i in range(1, half)], bound)
    one = float_constant(op, 1.0, bound)
    left = op.Sub(one, op.Pow(step, left_powers))
    right = op.Sub(op.Pow(step, right_powers), one)
    outer = op.Mul(bound, float_constant(op, 2.0, bound))
    zero = op.Mul(bound, float_constant(op, 0.0, bound))
    return op.Concat(op.Neg(outer), left, zero, right, outer, axis=0)


def distance_to_box(op, points, distances, reg_scale):
    """transformers' ``distance2bbox``: each side of ``points`` (``cx, cy, w, h``) moved by its
    distance in units of ``size / reg_scale`` (plus half the box), as ``cx, cy, w, h``."""
    scale = op.Abs(reg_scale)
    half = op.Mul(float_constant(op, 0.5, scale), scale)
    centers = op.Slice(points, [0], [2], [-1])
    sizes = op.Div(op.Slice(points, [2], [4], [-1]), scale)
    before = op.Slice(distances, [0], [2], [-1])
    after = op.Slice(distances, [2], [4], [-1])
    top_left = op.Sub(centers, op.Mul(op.Add(half, before), sizes))
    bottom_right = op.Add(centers, op.Mul(op.Add(half, after), sizes))
    two = float_constant(op, 2.0, scale)
    return op.Concat(
        op.Div(op.Add(top_left, bottom_right), two), op.Sub(bottom_right, top_left), axis=-1
    )


class DFineLQE(nn.Module):
    """The quality term: each side's top bin probabilities and their mean through an MLP."""

    def __init__(self, config: DFineConfig) -> None:
        super().__init__()
        self.bins = config.max_num_bins + 1
        self.top = config.top_prob_values
        width = 4 * (self.top + 1)
        self.reg_conf = DetrMLPPredictionHead(width, config.lqe_hidden_dim, 1, config.lqe_layers)

    def forward(self, op, scores, corners):
        sides = op.Reshape(corners, op.Constant(value_ints=[0, 0, 4, self.bins]))
        top, _ = op.TopK(
            op.Softmax(sides, axis=-1), op.Constant(value_ints=[self.top]), axis=-1, _outputs=2
        )
        mean = op.ReduceMean(top, op.Constant(value_ints=[-1]), keepdims=1)
        stats = op.Reshape(op.Concat(top, mean, axis=-1), op.Constant(value_ints=[0, 0, -1]))
        return op.Add(scores, self.reg_conf(op, stats))


class DFineDecoder(RTDetrDecoder):
    """The layers with distribution refinement; returns the last layer's quality-corrected
    ``logits`` and its boxes."""

    layer_class = DFineDecoderLayer

    def __init__(self, config: DFineConfig) -> None:
        super().__init__(config)
        d, bins = config.d_model, config.max_num_bins + 1
        self.config = config
        self.bbox_embed = nn.ModuleList(
            [DetrMLPPredictionHead(d, d, 4 * bins, 3) for _ in range(config.decoder_layers)]
        )
        self.pre_bbox_head = DetrMLPPredictionHead(d, d, 4, 3)
        self.lqe_layers = nn.ModuleList([DFineLQE(config) for _ in range(config.decoder_layers)])
        self.reg_scale = nn.Parameter([1])
        self.up = nn.Parameter([1])

    def integral(self, op, corners, project):
        """Each side's expected offset: the bins' softmax times the weighting function."""
        bins = self.config.max_num_bins + 1
        sides = op.Softmax(op.Reshape(corners, op.Constant(value_ints=[0, 0, 4, bins])), axis=-1)
        return op.MatMul(sides, op.Unsqueeze(project, [-1]))  # [batch, queries, 4, 1]

    def forward(self, op, queries, memory, boxes_logits, level_shapes):
        project = weighting_function(op, self.config.max_num_bins, self.up, self.reg_scale)
        hidden, boxes = queries, op.Sigmoid(boxes_logits)
        limit = float_constant(op, POSITION_CLAMP, memory)
        initial = corners = previous = None
        for index, (layer, box_head) in enumerate(zip(self.layers, self.bbox_embed, strict=True)):
            positions = op.Clip(self.query_pos_head(op, boxes), op.Neg(limit), limit)
            hidden = layer(op, hidden, positions, memory, boxes, level_shapes)
            if index == 0:
                initial = op.Sigmoid(
                    op.Add(self.pre_bbox_head(op, hidden), inverse_sigmoid(op, boxes))
                )
                corners = box_head(op, hidden)
            else:
                corners = op.Add(box_head(op, op.Add(hidden, previous)), corners)
            distances = op.Squeeze(self.integral(op, corners, project), [-1])
            boxes = distance_to_box(op, initial, distances, self.reg_scale)
            previous = hidden
        last = len(self.layers) - 1
        logits = self.lqe_layers[last](op, self.class_embed[last](op, hidden), corners)
        return logits, boxes


class DFineModel(RTDetrModel):
    encoder_class = DFineHybridEncoder
    decoder_class = DFineDecoder

    def decoder_projections(self, config: DFineConfig) -> list:
        """None where the encoder already has ``d_model`` channels (transformers' Identity)."""
        d, eps = config.d_model, config.batch_norm_eps
        in_ch = config.decoder_in_channels[-1]
        if d == in_ch:
            return [Identity() for _ in range(config.num_feature_levels)]
        levels = len(config.decoder_in_channels)
        projections = [ConvBatchNorm(in_ch, d, eps=eps) for _ in range(levels)]
        extra = config.num_feature_levels - levels
        return projections + [ConvBatchNorm(in_ch, d, 3, 2, 1, eps=eps) for _ in range(extra)]


class DFineForObjectDetection(RTDetrV2ForObjectDetection):
    config_class = DFineConfig
    model_class = DFineModel

    @property
    def ignored(self) -> tuple[str, ...]:
        """RT-DETR's, and the quality heads of the layers before the last."""
        earlier = tuple(
            f"model.decoder.lqe_layers.{index}.*" for index in range(self.config.decoder_layers - 1)
        )
        return (*super().ignored, *earlier)


MODEL_TYPES = {"d_fine": DFineForObjectDetection}
