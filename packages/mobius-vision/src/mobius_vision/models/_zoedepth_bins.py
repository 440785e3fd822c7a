"""ZoeDepth's metric bins heads: seed bins, attractors, and a conditional log-binomial per pixel.

Module names follow transformers' checkpoint keys (``metric_head.seed_bin_regressor.conv1``,
``metric_head.attractors.0.conv2``, ``metric_head.conditional_log_binomial.mlp.0``...).
What transformers hard-codes is kept: the single head's seed regressor is 256 wide and its
projectors 128; the "NK" heads' are ``bin_embedding_dim // 2``, and every NK attractor
has 16 points whatever ``num_attractors`` says (only its length counts). The attractors
pull with ``inv_attractor``'s defaults (alpha 300, gamma 2), not the config's
``attractor_alpha``/``attractor_gamma``, which transformers never passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, LayerNorm, Linear, bidirectional_attention
from mobius_vision.models._conv import Activation, Sequential
from mobius_vision.models._dpt_neck import resize_to

#: transformers' ``inv_attractor`` default alpha (and gamma 2), what every attractor runs with.
ATTRACTOR_ALPHA = 300.0
#: The attractor count of every "NK" attractor layer (transformers' default argument).
NK_ATTRACTORS = 16
#: The bin-centre and probability floor transformers adds before normalising.
BIN_EPS, PROBABILITY_EPS = 1e-3, 1e-4


@dataclass(frozen=True)
class BinConfiguration:
    """One metric head's bins: ``n_bins`` centres between ``min_depth`` and ``max_depth``."""

    name: str | None
    n_bins: int
    min_depth: float
    max_depth: float


def constant(op, value, like):
    """``value`` (a number or float32 array) as a constant of ``like``'s type (f16 builds)."""
    return op.CastLike(op.Constant(value=ir.tensor(np.asarray(value, np.float32))), like)


def resize_like(op, x, like):
    """``x`` resized bilinearly (``align_corners=True``) to ``like``'s height and width."""
    return resize_to(op, x, op.Shape(like, start=2, end=4), align_corners=True)


class Projector(nn.Module):
    """``conv2(relu(conv1(x)))``, 1x1 convs."""

    def __init__(self, in_features: int, out_features: int, mlp_dim: int) -> None:
        super().__init__()
        self.conv1 = Conv2d(in_features, mlp_dim, 1)
        self.conv2 = Conv2d(mlp_dim, out_features, 1)

    def forward(self, op, x):
        return self.conv2(op, op.Relu(self.conv1(op, x)))


class SeedBinRegressor(nn.Module):
    """The first bin centres ``[batch, n_bins, h, w]`` from the bottleneck: softplus centres,
    or (``normed``) positive widths summed from ``min_depth`` and their midpoints."""

    def __init__(self, in_features: int, mlp_dim: int, bins: BinConfiguration, normed: bool):
        super().__init__()
        self.conv1 = Conv2d(in_features, mlp_dim, 1)
        self.conv2 = Conv2d(mlp_dim, bins.n_bins, 1)
        self.bins, self.normed = bins, normed

    def forward(self, op, x):
        x = self.conv2(op, op.Relu(self.conv1(op, x)))
        if not self.normed:
            return op.Softplus(x)
        bins = self.bins
        centers = op.Add(op.Relu(x), constant(op, BIN_EPS, x))
        widths = op.Div(centers, op.ReduceSum(centers, op.Constant(value_ints=[1]), keepdims=1))
        widths = op.Mul(widths, constant(op, bins.max_depth - bins.min_depth, x))
        first = op.Mul(op.Slice(widths, [0], [1], [1]), constant(op, 0.0, x))
        first = op.Add(first, constant(op, bins.min_depth, x))
        edges = op.CumSum(op.Concat(first, widths, axis=1), op.Constant(value_int=1))
        lower = op.Slice(edges, [0], [-1], [1])
        upper = op.Slice(edges, [1], [2**62], [1])
        return op.Mul(op.Add(lower, upper), constant(op, 0.5, x))


class AttractorLayer(nn.Module):
    """Attractor points from the bin embedding (plus the previous one, resized) pull the
    previous bin centres: ``c + reduce_a (a - c) / (1 + 300 (a - c)^2)``.

    Unnormed (softplus centres): the points are a softplus, the centres stay unbounded.
    Normed: ``2 n`` ReLU outputs of which the first of each pair is a point (transformers
    keeps the original repository's slicing), and the centres are scaled to the depth
    range, sorted and clipped to it.
    """

    def __init__(self, dim: int, attractors: int, bins: BinConfiguration, normed: bool, kind: str):
        super().__init__()
        self.conv1 = Conv2d(dim, dim, 1)
        self.conv2 = Conv2d(dim, attractors * (2 if normed else 1), 1)
        self.attractors, self.bins, self.normed, self.kind = attractors, bins, normed, kind

    def points(self, op, x):
        """The attractor points ``[batch, attractors, h, w]``."""
        x = self.conv2(op, op.Relu(self.conv1(op, x)))
        if not self.normed:
            return op.Softplus(x)
        x = op.Add(op.Relu(x), constant(op, BIN_EPS, x))
        shape = op.Concat(
            op.Shape(x, start=0, end=1),
            op.Constant(value_ints=[self.attractors, 2]),
            op.Shape(x, start=2, end=4),
            axis=0,
        )
        return op.Gather(op.Reshape(x, shape), op.Constant(value_int=0), axis=2)

    def forward(self, op, x, previous_bins, previous_embedding):
        """``(new centres, scaled centres)``, both ``[batch, n_bins, h, w]``."""
        x = op.Add(x, resize_like(op, previous_embedding, x))
        points = op.Unsqueeze(self.points(op, x), [2])  # [batch, attractors, 1, h, w]
        centers = resize_like(op, previous_bins, x)
        dx = op.Sub(points, op.Unsqueeze(centers, [1]))
        strength = op.Mul(op.Mul(dx, dx), constant(op, ATTRACTOR_ALPHA, dx))  # gamma 2
        pull = op.Div(dx, op.Add(strength, constant(op, 1.0, dx)))
        reduce = op.ReduceMean if self.kind == "mean" else op.ReduceSum
        new = op.Add(centers, reduce(pull, op.Constant(value_ints=[1]), keepdims=0))
        if not self.normed:
            return new, new
        bins = self.bins
        scaled = op.Add(
            op.Mul(new, constant(op, bins.max_depth - bins.min_depth, new)),
            constant(op, bins.min_depth, new),
        )
        k = op.Constant(value_ints=[bins.n_bins])
        scaled, _ = op.TopK(scaled, k, axis=1, largest=0, sorted=1, _outputs=2)
        low, high = constant(op, bins.min_depth, new), constant(op, bins.max_depth, new)
        return new, op.Clip(scaled, low, high)


def log_binomial_constant(n_bins: int) -> np.ndarray:
    """``log C(n_bins - 1, k)`` by Stirling, in float32 as transformers' ``log_binom``
    computes it, ``[1, n_bins, 1, 1]``."""
    f = np.float32
    eps = f(1e-7)
    n = f(n_bins - 1) + eps
    k = np.arange(n_bins, dtype=f) + eps
    value = n * np.log(n) - k * np.log(k) - (n - k) * np.log(n - k + eps)
    return value.astype(f).reshape(1, n_bins, 1, 1)


class ConditionalLogBinomialSoftmax(nn.Module):
    """Per pixel: ``(p, t)`` from an MLP over ``[main, condition]``, then a softmax over the
    bins of the log-binomial ``log C(n-1, k) + k log p + (n-1-k) log(1-p)`` at temperature ``t``."""

    def __init__(self, in_features: int, bins: int, bottleneck_factor: int, temps: tuple):
        super().__init__()
        hidden = in_features // bottleneck_factor
        # 2 logits for the probability, 2 for the temperature, each normalised as a pair
        self.mlp = Sequential(
            [Conv2d(in_features, hidden, 1), Activation("gelu"), Conv2d(hidden, 4, 1)]
        )
        self.bins, (self.min_temp, self.max_temp) = bins, temps

    def forward(self, op, main, condition):
        x = op.Softplus(self.mlp(op, op.Concat(main, condition, axis=1)))
        x = op.Add(x, constant(op, PROBABILITY_EPS, x))
        p = op.Div(op.Slice(x, [0], [1], [1]), op.ReduceSum(op.Slice(x, [0], [2], [1]), [1]))
        t = op.Div(op.Slice(x, [2], [3], [1]), op.ReduceSum(op.Slice(x, [2], [4], [1]), [1]))
        t = op.Add(
            op.Mul(t, constant(op, self.max_temp - self.min_temp, t)),
            constant(op, self.min_temp, t),
        )
        eps, one = constant(op, PROBABILITY_EPS, p), constant(op, 1.0, p)
        log_q = op.Log(op.Clip(op.Sub(one, p), eps, one))
        log_p = op.Log(op.Clip(p, eps, one))
        k = np.arange(self.bins, dtype=np.float32).reshape(1, -1, 1, 1)
        y = op.Add(
            constant(op, log_binomial_constant(self.bins), p),
            op.Add(
                op.Mul(constant(op, k, p), log_p),
                op.Mul(constant(op, self.bins - 1 - k, p), log_q),
            ),
        )
        return op.Softmax(op.Div(y, t), axis=1)


def sinusoid_positions(op, tokens, dim: int):
    """transformers' ``positional_encoding_1d``: ``[sin(p w), cos(p w)]`` for positions 0..n-1
    (``n`` from ``tokens`` ``[batch, n, dim]``), ``w = 10000^(-2i/dim)``, ``[1, n, dim]``."""
    index = np.arange(0, dim, 2, dtype=np.float32)
    rate = np.exp(index * np.float32(-math.log(10000.0) / dim)).astype(np.float32)
    count = op.Squeeze(op.Shape(tokens, start=1, end=2), [0])
    position = op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1))
    position = op.CastLike(op.Cast(position, to=ir.DataType.FLOAT), tokens)
    angle = op.Mul(op.Unsqueeze(position, [1]), constant(op, rate[None], tokens))
    return op.Unsqueeze(op.Concat(op.Sin(angle), op.Cos(angle), axis=1), [0])


class MultiheadAttention(nn.Module):
    """``query``/``key``/``value``/``out_proj`` self-attention (scaled dot product)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.query, self.key = Linear(dim, dim, bias=True), Linear(dim, dim, bias=True)
        self.value, self.out_proj = Linear(dim, dim, bias=True), Linear(dim, dim, bias=True)
        self.heads, self.scale = heads, 1 / math.sqrt(dim // heads)

    def forward(self, op, x):
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        return self.out_proj(op, bidirectional_attention(op, q, k, v, None, self.heads, self.scale))


class PatchTransformerLayer(nn.Module):
    """A post-norm encoder layer with a ReLU MLP (``nn.TransformerEncoderLayer``'s layout)."""

    def __init__(self, dim: int, intermediate: int, heads: int) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(dim, heads)
        self.linear1, self.linear2 = (
            Linear(dim, intermediate, True),
            Linear(intermediate, dim, True),
        )
        self.norm1, self.norm2 = LayerNorm(dim), LayerNorm(dim)

    def forward(self, op, x):
        x = self.norm1(op, op.Add(x, self.self_attn(op, x)))
        return self.norm2(op, op.Add(x, self.linear2(op, op.Relu(self.linear1(op, x)))))


#: How many patch-transformer layers transformers runs (it builds ``num_patch_transformer_layers``).
PATCH_TRANSFORMER_LAYERS_RUN = 4


class PatchTransformerEncoder(nn.Module):
    """A 1x1 conv to tokens, a zero class token in front, sinusoid positions, 4 layers."""

    def __init__(self, in_channels: int, dim: int, intermediate: int, heads: int) -> None:
        super().__init__()
        self.embedding_convPxP = Conv2d(in_channels, dim, 1)
        self.transformer_encoder = nn.ModuleList(
            [
                PatchTransformerLayer(dim, intermediate, heads)
                for _ in range(PATCH_TRANSFORMER_LAYERS_RUN)
            ]
        )
        self.dim = dim

    def forward(self, op, x):
        x = self.embedding_convPxP(op, x)
        x = op.Reshape(x, op.Concat(op.Shape(x, start=0, end=2), [-1], axis=0))
        x = op.Transpose(op.Pad(x, op.Constant(value_ints=[0, 0, 1, 0, 0, 0])), perm=[0, 2, 1])
        x = op.Add(x, sinusoid_positions(op, x, self.dim))
        for layer in self.transformer_encoder:
            x = layer(op, x)
        return x


class ByName(nn.ModuleList):
    """``nn.ModuleDict``: children named by the bin configurations (names checked by the config).

    A ModuleList underneath, so that its children carry qualified names (``attractors.nyu.0``)
    and are called directly, as a ModuleList's are."""

    def __init__(self, modules: dict[str, nn.Module]) -> None:
        super().__init__()
        for name, module in modules.items():
            self._register_child(name, module)

    def __getitem__(self, name: str) -> nn.Module:
        return self._modules[name]


class BinsDepth(nn.Module):
    """What both metric heads share: seed bins from the bottleneck, refined by an attractor
    layer per fused map (coarsest first), then the depth as the expectation of the bin
    centres under the per-pixel log-binomial over ``last`` and the last bin embedding."""

    def bins_depth(self, op, x, fused: list, last, parts: tuple) -> ir.Value:
        """``[batch, H, W]`` from the bottleneck ``x``, the fused maps and ``last`` (the head's
        features); ``parts``: ``(seed regressor, attractors, log-binomial, bins)`` of a domain."""
        seed_bin_regressor, attractors, log_binomial, bins = parts
        centers = seed_bin_regressor(op, x)
        previous = centers
        if self.normed:
            previous = op.Div(
                op.Sub(centers, constant(op, bins.min_depth, centers)),
                constant(op, bins.max_depth - bins.min_depth, centers),
            )
        embedding = self.seed_projector(op, x)
        for projector, attractor, feature in zip(self.projectors, attractors, fused, strict=False):
            new_embedding = projector(op, feature)
            previous, centers = attractor(op, new_embedding, previous, embedding)
            embedding = new_embedding
        probabilities = log_binomial(op, last, resize_like(op, embedding, last))
        centers = resize_like(op, centers, probabilities)
        return op.ReduceSum(op.Mul(probabilities, centers), op.Constant(value_ints=[1]), keepdims=0)


#: The fused maps the metric heads read (transformers builds 4 projectors and zips them).
METRIC_STEPS = 4


class MetricDepthEstimationHead(BinsDepth):
    """One bin configuration; the log-binomial sees the relative head's features and depth."""

    def __init__(self, config) -> None:
        super().__init__()
        (bins,) = config.bins
        bottleneck, dim = config.bottleneck_features, config.bin_embedding_dim
        self.normed = config.bin_centers_type == "normed"
        self.conv2 = Conv2d(bottleneck, bottleneck, 1)
        self.seed_bin_regressor = SeedBinRegressor(bottleneck, 256, bins, self.normed)
        self.seed_projector = Projector(bottleneck, dim, 128)
        self.projectors = nn.ModuleList(
            [Projector(config.fusion_hidden_size, dim, 128) for _ in range(METRIC_STEPS)]
        )
        self.attractors = nn.ModuleList(
            [
                AttractorLayer(dim, count, bins, self.normed, config.attractor_kind)
                for count in config.num_attractors[:METRIC_STEPS]
            ]
        )
        features = config.num_relative_features + 1 + dim  # + the relative depth
        temps = (config.min_temp, config.max_temp)
        self.conditional_log_binomial = ConditionalLogBinomialSoftmax(
            features, bins.n_bins, 2, temps
        )
        self.bins = bins

    def forward(self, op, features, bottleneck, fused: list, relative_depth):
        """``(predicted_depth, None)``: no domain logits."""
        last = op.Concat(features, op.Unsqueeze(relative_depth, [1]), axis=1)
        parts = (self.seed_bin_regressor, self.attractors, self.conditional_log_binomial, self.bins)
        return self.bins_depth(op, self.conv2(op, bottleneck), fused, last, parts), None


class MultipleMetricDepthEstimationHeads(BinsDepth):
    """The "NK" heads: a patch transformer over the bottleneck and an MLP give two domain
    logits per image; the domain whose logits summed over the batch are larger (the first
    on a tie, as ``argmax``) is the one whose bins give every image's depth. Both domains
    are computed and one is selected, so the graph has no branch."""

    def __init__(self, config) -> None:
        super().__init__()
        bottleneck, dim = config.bottleneck_features, config.bin_embedding_dim
        self.normed = config.bin_centers_type == "normed"
        self.conv2 = Conv2d(bottleneck, bottleneck, 1)
        self.patch_transformer = PatchTransformerEncoder(
            bottleneck,
            config.patch_transformer_hidden_size,
            config.patch_transformer_intermediate_size,
            config.patch_transformer_num_attention_heads,
        )
        self.mlp_classifier = MlpClassifier(config.patch_transformer_hidden_size, len(config.bins))
        self.seed_bin_regressors = ByName(
            {b.name: SeedBinRegressor(bottleneck, dim // 2, b, self.normed) for b in config.bins}
        )
        self.seed_projector = Projector(bottleneck, dim, dim // 2)
        self.projectors = nn.ModuleList(
            [Projector(config.fusion_hidden_size, dim, dim // 2) for _ in range(METRIC_STEPS)]
        )
        kind, count = config.attractor_kind, NK_ATTRACTORS
        self.attractors = ByName(
            {
                b.name: nn.ModuleList(
                    [
                        AttractorLayer(dim, count, b, self.normed, kind)
                        for _ in config.num_attractors
                    ]
                )
                for b in config.bins
            }
        )
        temps = (config.min_temp, config.max_temp)
        features = config.num_relative_features + dim
        self.conditional_log_binomial = ByName(
            {
                b.name: ConditionalLogBinomialSoftmax(features, b.n_bins, 4, temps)
                for b in config.bins
            }
        )
        self.bins = config.bins

    def forward(self, op, features, bottleneck, fused: list, relative_depth):
        """``(predicted_depth, domain_logits [batch, 2])``."""
        x = self.conv2(op, bottleneck)
        first_token = op.Gather(self.patch_transformer(op, x), op.Constant(value_int=0), axis=1)
        domain_logits = self.mlp_classifier(op, first_token)
        votes = op.ReduceSum(domain_logits, op.Constant(value_ints=[0]), keepdims=0)
        first_wins = op.GreaterOrEqual(
            op.Gather(votes, op.Constant(value_int=0), axis=0),
            op.Gather(votes, op.Constant(value_int=1), axis=0),
        )
        depths = [
            self.bins_depth(
                op,
                x,
                fused,
                features,
                (
                    self.seed_bin_regressors[b.name],
                    self.attractors[b.name],
                    self.conditional_log_binomial[b.name],
                    b,
                ),
            )
            for b in self.bins
        ]
        return op.Where(first_wins, depths[0], depths[1]), domain_logits


class MlpClassifier(nn.Module):
    """``linear2(relu(linear1(x)))``, as wide as its input."""

    def __init__(self, dim: int, classes: int) -> None:
        super().__init__()
        self.linear1, self.linear2 = Linear(dim, dim, True), Linear(dim, classes, True)

    def forward(self, op, x):
        return self.linear2(op, op.Relu(self.linear1(op, x)))
